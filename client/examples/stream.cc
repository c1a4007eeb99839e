// A pipelined session: send many jobs on one Stream, take results from its
// queue in completion order, match them by tag.
//   tpool_client_example_stream [ADDRESS]
#include <iostream>

#include "tpool/client/client.h"
#include "tpool/client/stream.h"

int main(int argc, char** argv) {
  tpool::client::ClientOptions options;
  if (argc > 1) options.address = argv[1];
  tpool::client::Client client(options);

  // No on_result callback: results queue up for next().
  auto session = client.stream({.on_result = {}, .deadline = std::chrono::seconds(30)});
  constexpr std::uint64_t kJobs = 1000;
  for (std::uint64_t sent = 0; sent < kJobs; sent += 100) {
    std::vector<tpool::client::Job> message;
    for (std::uint64_t i = sent; i < sent + 100; ++i) {
      tpool::client::Job job;
      job.handler = "echo";
      job.payload = std::to_string(i);
      job.tag = i;  // results come back in completion order: match them by tag
      message.push_back(std::move(job));
    }
    if (!session->send(message)) break;  // the call ended; finish() says why
  }
  session->close_send();  // results of the jobs sent still arrive

  std::uint64_t ok = 0, received = 0;
  while (auto r = session->next(std::chrono::seconds(10))) {
    ++received;
    if (r->succeeded() && r->output == std::to_string(r->tag)) ++ok;
  }
  tpool::client::Error status = session->finish();
  std::cout << received << " results, " << ok << " correct, stream "
            << (status.ok() ? "OK" : status.to_string()) << "\n";
  return status.ok() && ok == kJobs ? 0 : 1;
}
