// Compiles clean under clang -Wthread-safety -Werror (see CMakeLists.txt).
#include "tpool/common/mutex.h"

class Counter {
 public:
  void add() EXCLUDES(mu_) {
    tpool::MutexLock lk(mu_);
    ++n_;
    cv_.notify_all();
  }
  int wait_nonzero() EXCLUDES(mu_) {
    tpool::MutexLock lk(mu_);
    cv_.wait(lk, [&]() REQUIRES(mu_) { return n_ != 0; });
    return n_;
  }
  int get_locked() REQUIRES(mu_) { return n_; }

 private:
  tpool::Mutex mu_;
  tpool::CondVar cv_;
  int n_ GUARDED_BY(mu_) = 0;
};

// The same with a WordMutex (no CondVar: none waits on one).
class WordCounter {
 public:
  void add() EXCLUDES(mu_) {
    tpool::WordLock lk(mu_);
    ++n_;
    lk.unlock();
    lk.lock();
    ++n_;
  }
  int get_locked() REQUIRES(mu_) { return n_; }

 private:
  tpool::WordMutex mu_;
  int n_ GUARDED_BY(mu_) = 0;
};

int main() {
  WordCounter w;
  w.add();
  Counter c;
  c.add();
  return c.wait_nonzero() == 1 ? 0 : 1;
}
