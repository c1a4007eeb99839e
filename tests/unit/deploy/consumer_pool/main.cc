// Links the installed libtpool_pool through tpool::pool. Prints one line per
// check; the driver (package_consumer.cmake) compares the output.
#include <cstdio>
#include <string>

#include "tpool/pool.h"

#if TPOOL_CONSUMER_RUNS_POOL
namespace {
void add_one(void* ctx) {
  ++*static_cast<int*>(ctx);
}
}  // namespace
#endif

int main() {
  // Status::to_string and to_string(StatusCode) live in the library, so this
  // line proves the link, not only the headers.
  const tpool::Status st = tpool::Status::Full("no free descriptor");
  std::printf("status: %s\n", st.to_string().c_str());
#if TPOOL_CONSUMER_RUNS_POOL
  tpool::Config config;
  config.min_threads = 1;
  config.max_threads = 2;
  config.queue_capacity = 16;
  auto pool = tpool::Pool::create(config);
  if (!pool.ok()) {
    std::printf("create failed: %s\n", pool.status().to_string().c_str());
    return 1;
  }
  int counter = 0;
  tpool::SubmitOptions opts;
  opts.waitable = true;
  auto handle = pool.value()->submit({add_one, &counter}, opts);
  if (!handle.ok()) {
    std::printf("submit failed: %s\n", handle.status().to_string().c_str());
    return 1;
  }
  auto outcome = pool.value()->wait(handle.value());
  if (!outcome.ok()) {
    std::printf("wait failed: %s\n", outcome.status().to_string().c_str());
    return 1;
  }
  std::printf("task: %s counter=%d\n", std::string(tpool::to_string(outcome.value())).c_str(),
              counter);
#endif
  return 0;
}
