// Must NOT compile under clang -Wthread-safety -Werror (see CMakeLists.txt):
// add() writes n_ without holding mu_.
#include "tpool/common/mutex.h"

class Counter {
 public:
  void add() { ++n_; }  // the error the analysis must report

 private:
  tpool::Mutex mu_;
  int n_ GUARDED_BY(mu_) = 0;
};

int main() {
  Counter c;
  c.add();
  return 0;
}
