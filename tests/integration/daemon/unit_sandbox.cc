// tpool-unit-sandbox: runs a program under the system-call confinement of a
// systemd unit file, for tests on machines where systemd is not PID 1
// (issue 18: isolated plugins must work under deploy/systemd/tpoold.service).
//
//   tpool-unit-sandbox UNIT_FILE -- PROGRAM [ARGS...]
//
// What it applies, read from UNIT_FILE, as systemd 252 does (systemd.exec(5)):
//   - SystemCallFilter=: the first line (without "~") makes an allow-list,
//     each later line adds to it or ("~") takes from it, in order; a set
//     (@name) is expanded with `systemd-analyze syscall-filter`, systemd's
//     own tables. Calls outside
//     the list fail with SystemCallErrorNumber= (EPERM here), as in the unit.
//   - RestrictNamespaces=yes: clone/clone3/unshare/setns that ask for a new
//     namespace fail with EPERM (clone3's flags are in memory seccomp cannot
//     read: systemd answers all of clone3 with ENOSYS so callers fall back
//     to clone; so does this).
//   - MemoryDenyWriteExecute=yes: mmap with PROT_WRITE|PROT_EXEC, mprotect
//     and pkey_mprotect with PROT_EXEC fail with EPERM.
//   - NoNewPrivileges=yes, and CapabilityBoundingSet= (empty): no capability
//     left, even for root (the unit runs as a dynamic unprivileged user).
// Anything else in the unit (ProtectSystem=, PrivateUsers=, ...) is not
// emulated. A key this program would have to understand and does not (an
// allow-list it cannot expand, an unknown call) makes it fail with a message
// and exit 2, so a changed unit fails the test rather than passing unchecked.
#include <errno.h>
#include <linux/capability.h>
#include <sched.h>
#include <seccomp.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace {

[[noreturn]] void die(const std::string& why) {
  std::cerr << "tpool-unit-sandbox: " << why << "\n";
  std::exit(2);
}

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t");
  const auto e = s.find_last_not_of(" \t\r");
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

// systemd's tables: set name -> its members (calls and nested @sets).
std::map<std::string, std::vector<std::string>> systemd_sets() {
  FILE* p = ::popen("systemd-analyze syscall-filter --no-pager 2>/dev/null", "r");
  if (p == nullptr) die("cannot run systemd-analyze (apt-get install systemd)");
  std::map<std::string, std::vector<std::string>> sets;
  std::string current;
  char line[512];
  while (std::fgets(line, sizeof line, p) != nullptr) {
    std::string l(line);
    if (!l.empty() && l.back() == '\n') l.pop_back();
    if (l.empty()) continue;
    if (l[0] == '@') {
      current = trim(l);
      sets[current];
      continue;
    }
    std::string item = trim(l);
    if (item.empty() || item[0] == '#' || current.empty()) continue;
    sets[current].push_back(item);
  }
  if (::pclose(p) != 0 || sets.empty()) die("systemd-analyze syscall-filter gave no sets");
  return sets;
}

void expand(const std::map<std::string, std::vector<std::string>>& sets, const std::string& name,
            std::set<std::string>& out, int depth = 0) {
  if (depth > 16) die("set nesting too deep at " + name);
  if (name[0] != '@') {
    out.insert(name);
    return;
  }
  auto it = sets.find(name);
  if (it == sets.end()) die("systemd-analyze knows no set " + name);
  for (const auto& m : it->second) expand(sets, m, out, depth + 1);
}

struct Unit {
  // SystemCallFilter= lines in order: (deny, names). The first one without
  // "~" makes the filter an allow-list; later lines add to it or take from it.
  std::vector<std::pair<bool, std::vector<std::string>>> filters;
  int error_number = 0;  // SystemCallErrorNumber=; 0: kill
  bool restrict_namespaces = false;
  bool deny_write_execute = false;
  bool no_new_privileges = false;
  bool no_capabilities = false;
};

Unit read_unit(const std::string& path) {
  std::ifstream f(path);
  if (!f) die("cannot read " + path);
  Unit u;
  for (std::string line; std::getline(f, line);) {
    line = trim(line);
    auto eq = line.find('=');
    if (line.empty() || line[0] == '#' || eq == std::string::npos) continue;
    const std::string key = line.substr(0, eq), value = trim(line.substr(eq + 1));
    if (key == "SystemCallFilter") {
      std::istringstream words(value[0] == '~' ? value.substr(1) : value);
      std::vector<std::string> names;
      for (std::string w; words >> w;) names.push_back(w);
      if (u.filters.empty() && value[0] == '~') {
        die("a deny-list unit (SystemCallFilter=" + value + " first) is not emulated");
      }
      u.filters.emplace_back(value[0] == '~', std::move(names));
    } else if (key == "SystemCallErrorNumber") {
      if (value != "EPERM") die("SystemCallErrorNumber=" + value + " is not emulated");
      u.error_number = EPERM;
    } else if (key == "RestrictNamespaces") {
      if (value != "yes") die("RestrictNamespaces=" + value + " is not emulated");
      u.restrict_namespaces = true;
    } else if (key == "MemoryDenyWriteExecute") {
      u.deny_write_execute = value == "yes";
    } else if (key == "NoNewPrivileges") {
      u.no_new_privileges = value == "yes";
    } else if (key == "CapabilityBoundingSet") {
      if (!value.empty()) die("CapabilityBoundingSet=" + value + " is not emulated");
      u.no_capabilities = true;
    }
  }
  if (u.filters.empty()) die(path + " has no SystemCallFilter= allow-list");
  return u;
}

void drop_capabilities() {
  for (int cap = 0; cap <= CAP_LAST_CAP; ++cap) (void)::prctl(PR_CAPBSET_DROP, cap, 0, 0, 0);
  __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2] = {};
  if (::syscall(SYS_capset, &header, data) != 0) die("capset: cannot drop capabilities");
}

void add(scmp_filter_ctx ctx, uint32_t action, int nr, std::vector<scmp_arg_cmp> args = {}) {
  int rc = ::seccomp_rule_add_array(ctx, action, nr, static_cast<unsigned>(args.size()),
                                    args.empty() ? nullptr : args.data());
  if (rc != 0)
    die("seccomp_rule_add for call " + std::to_string(nr) + " failed: " + std::to_string(rc));
}

void install_filter(const Unit& u) {
  const auto sets = systemd_sets();
  std::set<std::string> allowed;
  for (const auto& [deny, names] : u.filters) {
    std::set<std::string> these;
    for (const auto& n : names) expand(sets, n, these);
    for (const auto& n : these) {
      if (deny) {
        allowed.erase(n);
      } else {
        allowed.insert(n);
      }
    }
  }
  const uint32_t deny = u.error_number != 0 ? SCMP_ACT_ERRNO(u.error_number) : SCMP_ACT_KILL;
  scmp_filter_ctx ctx = ::seccomp_init(deny);
  if (ctx == nullptr) die("seccomp_init failed");
  constexpr uint64_t kNewNamespaces = CLONE_NEWNS | CLONE_NEWCGROUP | CLONE_NEWUTS | CLONE_NEWIPC |
                                      CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNET;
  constexpr uint64_t kWx = PROT_WRITE | PROT_EXEC;
  for (const auto& name : allowed) {
    const int nr = ::seccomp_syscall_resolve_name(name.c_str());
    if (nr == __NR_SCMP_ERROR) continue;  // not a call on this architecture (arm_fadvise64_64)
    if (u.restrict_namespaces && (name == "clone" || name == "unshare")) {
      const unsigned arg = 0;  // the flags (x86_64's clone: flags first)
      add(ctx, SCMP_ACT_ALLOW, nr, {SCMP_CMP(arg, SCMP_CMP_MASKED_EQ, kNewNamespaces, 0)});
      continue;
    }
    if (u.restrict_namespaces && name == "setns") continue;  // denied
    if (u.restrict_namespaces && name == "clone3") {
      add(ctx, SCMP_ACT_ERRNO(ENOSYS), nr);
      continue;
    }
    if (u.deny_write_execute && name == "mmap") {
      add(ctx, SCMP_ACT_ALLOW, nr, {SCMP_A2(SCMP_CMP_MASKED_EQ, kWx, 0)});
      add(ctx, SCMP_ACT_ALLOW, nr, {SCMP_A2(SCMP_CMP_MASKED_EQ, kWx, PROT_WRITE)});
      add(ctx, SCMP_ACT_ALLOW, nr, {SCMP_A2(SCMP_CMP_MASKED_EQ, kWx, PROT_EXEC)});
      continue;
    }
    if (u.deny_write_execute && (name == "mprotect" || name == "pkey_mprotect")) {
      add(ctx, SCMP_ACT_ALLOW, nr, {SCMP_A2(SCMP_CMP_MASKED_EQ, PROT_EXEC, 0)});
      continue;
    }
    add(ctx, SCMP_ACT_ALLOW, nr);
  }
  if (::seccomp_load(ctx) != 0) die("seccomp_load failed");
  ::seccomp_release(ctx);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4 || std::string(argv[2]) != "--") {
    die("usage: tpool-unit-sandbox UNIT_FILE -- PROGRAM [ARGS...]");
  }
  const Unit u = read_unit(argv[1]);
  if (u.no_capabilities) drop_capabilities();
  // The kernel needs it for a filter without CAP_SYS_ADMIN, so a unit
  // without it cannot be emulated faithfully.
  if (!u.no_new_privileges) die("a unit without NoNewPrivileges=yes is not emulated");
  if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) die("PR_SET_NO_NEW_PRIVS failed");
  install_filter(u);
  ::execv(argv[3], argv + 3);
  std::cerr << "tpool-unit-sandbox: execv " << argv[3] << ": " << std::strerror(errno) << "\n";
  return 127;
}
