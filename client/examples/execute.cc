// Run one job and print its output: the smallest use of tpool::client.
//   tpool_client_example_execute [ADDRESS]   (default 127.0.0.1:50051)
#include <iostream>

#include "tpool/client/client.h"

int main(int argc, char** argv) {
  tpool::client::ClientOptions options;
  if (argc > 1) options.address = argv[1];
  options.default_deadline = std::chrono::seconds(5);
  tpool::client::Client client(options);

  tpool::client::Job job;
  job.handler = "echo";
  job.payload = "hello, tpoold";
  auto result = client.execute(job);
  if (!result.ok()) {
    // e.g. "UNAVAILABLE: cannot reach tpoold (...)" or "NOT_FOUND: ..."
    std::cerr << "execute failed: " << result.error().to_string() << "\n";
    return 1;
  }
  if (!result->succeeded()) {  // the handler ran and failed: not an RPC error
    std::cerr << "job " << result->job_id << " " << to_string(result->state) << ": "
              << result->message << "\n";
    return 1;
  }
  std::cout << result->output << "\n";
  return 0;
}
