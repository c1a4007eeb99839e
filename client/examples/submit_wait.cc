// Submit jobs, then wait for them; safe to retry because each job carries an
// idempotency key (a repeated key returns the first job, never a second run).
//   tpool_client_example_submit_wait [ADDRESS]
#include <iostream>
#include <vector>

#include "tpool/client/client.h"

int main(int argc, char** argv) {
  tpool::client::ClientOptions options;
  if (argc > 1) options.address = argv[1];
  options.max_attempts = 5;  // UNAVAILABLE is retried, with backoff, for keyed jobs only
  tpool::client::Client client(options);

  std::vector<tpool::client::Job> jobs;
  for (int i = 0; i < 3; ++i) {
    tpool::client::Job job;
    job.handler = "hash";
    job.payload = "1000:block " + std::to_string(i);  // SHA-256 iterated 1000 times
    job.idempotency_key = "example-block-" + std::to_string(i);
    job.tag = static_cast<std::uint64_t>(i);
    jobs.push_back(job);
  }
  auto refs = client.submit_batch(jobs, {.deadline = std::chrono::seconds(5)});
  if (!refs.ok()) {
    std::cerr << "submit_batch failed: " << refs.error().to_string() << "\n";
    return 1;
  }
  int failures = 0;
  for (const auto& item : *refs) {
    if (!item.error.ok()) {  // one bad item does not fail the others
      std::cerr << "job " << item.tag << " rejected: " << item.error.to_string() << "\n";
      ++failures;
      continue;
    }
    auto result = client.wait(item.job_id, {.deadline = std::chrono::seconds(10)});
    if (!result.ok() || !result->succeeded()) {
      std::cerr << "job " << item.job_id << " did not succeed: "
                << (result.ok() ? result->message : result.error().to_string()) << "\n";
      ++failures;
      continue;
    }
    std::cout << "job " << item.job_id << " (tag " << item.tag << "): " << result->output.size()
              << " bytes of output\n";
  }
  return failures == 0 ? 0 : 1;
}
