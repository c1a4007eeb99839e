// Test-time TLS material: runs scripts/gen-test-certs.sh into a fresh
// temporary directory and removes it afterwards (nothing is committed).
#pragma once

#include <stdlib.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

namespace tpool::testing {

class TestCerts {
 public:
  // principal: the client certificate's CN and SAN.
  explicit TestCerts(const std::string& principal = "test-client") {
    char tmpl[] = "/tmp/tpool-certs.XXXXXX";
    if (::mkdtemp(tmpl) == nullptr) return;
    dir_ = tmpl;
    std::string cmd = std::string(TPOOL_GEN_TEST_CERTS) + " '" + dir_ + "' '" + principal +
                      "' > '" + dir_ + "/gen.log' 2>&1";
    ok_ = std::system(cmd.c_str()) == 0;
  }
  ~TestCerts() {
    if (!dir_.empty()) std::system(("rm -rf '" + dir_ + "'").c_str());
  }
  TestCerts(const TestCerts&) = delete;
  TestCerts& operator=(const TestCerts&) = delete;

  bool ok() const { return ok_; }
  const std::string& dir() const { return dir_; }
  std::string path(const std::string& name) const { return dir_ + "/" + name; }
  std::string read(const std::string& name) const {
    std::ifstream in(path(name), std::ios::binary);
    std::ostringstream s;
    s << in.rdbuf();
    return s.str();
  }

 private:
  std::string dir_;
  bool ok_ = false;
};

}  // namespace tpool::testing
