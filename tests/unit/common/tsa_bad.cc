// Must NOT compile under clang -Wthread-safety -Werror (see CMakeLists.txt):
// add() writes n_ without holding mu_. Built twice: with tpool::Mutex, and
// with tpool::WordMutex (-DTPOOL_TSA_WORD).
#include "tpool/common/mutex.h"

class Counter {
 public:
  void add() { ++n_; }  // the error the analysis must report

 private:
#ifdef TPOOL_TSA_WORD
  tpool::WordMutex mu_;
#else
  tpool::Mutex mu_;
#endif
  int n_ GUARDED_BY(mu_) = 0;
};

int main() {
  Counter c;
  c.add();
  return 0;
}
