// Bad plugins, each a real file in a real plugin directory next to two good
// examples (echo, fail): each gets its own exact error, and the host keeps
// serving the good ones (abort_on_load_error = false) or refuses to start
// (the default).
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <fstream>
#include <string>

#include "plugin_test_support.h"
#include "tpool/plugin.h"
#include "tpool/plugin_host/host.h"

namespace tpool::plugin_host {
namespace {

using testing::LogRecorder;
using testing::TempDir;
using testing::TestServices;

const std::string kExamples = TPOOL_EXAMPLE_PLUGIN_DIR;
const std::string kTestPlugins = TPOOL_IT_PLUGIN_DIR;

class BadPluginTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_.add(kExamples + "/echo.so");
    dir_.add(kExamples + "/fail.so");
  }
  std::string path(const std::string& name) const { return (dir_.path() / name).string(); }

  // Loads dir_ keeping the good plugins; expects exactly one error.
  LoadError load_one_error(HostConfig cfg = {}) {
    cfg.dirs = {dir_.str()};
    cfg.abort_on_load_error = false;
    cfg.log_sink = log_.sink();
    std::vector<LoadError> errors;
    auto loaded = Host::load(std::move(cfg), &errors);
    EXPECT_TRUE(loaded.ok()) << loaded.status().message();
    if (!loaded.ok()) return {};
    host_ = std::move(loaded).value();
    EXPECT_EQ(errors.size(), 1u);
    EXPECT_EQ(host_->load_errors().size(), errors.size());
    EXPECT_EQ(host_->counters().load_failures, errors.size());
    EXPECT_TRUE(log_.contains(errors.empty() ? "?" : errors[0].message));
    return errors.empty() ? LoadError{} : errors[0];
  }

  void expect_good_ones_serve() {
    ASSERT_TRUE(host_);
    TestServices services(host_.get());
    auto echo = host_->invoke(host_->find("echo"), "ping", services);
    ASSERT_TRUE(echo.ok()) << echo.message;
    EXPECT_EQ(echo.output, "ping");
    auto fail = host_->invoke(host_->find("fail"), "expected", services);
    EXPECT_EQ(fail.message, "fail: expected");
    EXPECT_EQ(host_->counters().plugins_loaded, 2u);
  }

  TempDir dir_;
  LogRecorder log_;
  std::unique_ptr<Host> host_;
};

TEST_F(BadPluginTest, NoEntrySymbol) {
  dir_.add(kTestPlugins + "/no_entry.so");
  LoadError e = load_one_error();
  EXPECT_EQ(e.kind, LoadErrorKind::kNoEntry);
  EXPECT_EQ(e.file, path("no_entry.so"));
  EXPECT_EQ(e.message, path("no_entry.so") +
                           " does not export the entry symbol tpool_plugin_entry: define it as "
                           "`TPOOL_PLUGIN_EXPORT const tpool_plugin* tpool_plugin_entry(const "
                           "tpool_host_api* host)` with C linkage (include tpool/plugin.h) and "
                           "check `nm -D " +
                           path("no_entry.so") + " | grep tpool_plugin_entry` lists it");
  expect_good_ones_serve();
}

TEST_F(BadPluginTest, AbiMajorMismatchNamesBothVersions) {
  dir_.add(kTestPlugins + "/abi_major.so");
  LoadError e = load_one_error();
  EXPECT_EQ(e.kind, LoadErrorKind::kAbiMajorMismatch);
  EXPECT_EQ(e.message, path("abi_major.so") +
                           " was built against plugin ABI 2.0 but this tpoold speaks ABI 1.1 and "
                           "major versions must match: rebuild the plugin against the "
                           "tpool/plugin.h shipped with this tpoold, or run a tpoold whose ABI "
                           "major is 2");
  expect_good_ones_serve();
}

TEST_F(BadPluginTest, AbiMinorNewerThanTheHostNamesBothVersions) {
  dir_.add(kTestPlugins + "/abi_minor_newer.so");
  LoadError e = load_one_error();
  EXPECT_EQ(e.kind, LoadErrorKind::kAbiMinorNewer);
  EXPECT_EQ(e.plugin, "abi_minor_newer");
  EXPECT_EQ(e.message, path("abi_minor_newer.so") +
                           " (plugin 'abi_minor_newer') was built against plugin ABI 1.2, newer "
                           "than this tpoold's ABI 1.1: it may use host functions this tpoold "
                           "lacks; upgrade tpoold, or rebuild the plugin against the "
                           "tpool/plugin.h shipped with this tpoold");
  expect_good_ones_serve();
}

TEST_F(BadPluginTest, DuplicateHandlerNameNamesBothPlugins) {
  dir_.add(kTestPlugins + "/dup_echo.so", "zz_dup_echo.so");  // sorts after echo.so
  LoadError e = load_one_error();
  EXPECT_EQ(e.kind, LoadErrorKind::kDuplicateHandler);
  EXPECT_EQ(e.message, path("zz_dup_echo.so") +
                           " (plugin 'dup_echo' 6.6.6) declares handler 'echo', which " +
                           path("echo.so") +
                           " (plugin 'echo') already registered; handler names are unique "
                           "across plugins, so " +
                           path("zz_dup_echo.so") +
                           " is not loaded: rename the handler or remove one of the files");
  expect_good_ones_serve();
  EXPECT_EQ(host_->find("echo").info().plugin_name, "echo");
}

TEST_F(BadPluginTest, InitErrorCarriesThePluginsMessage) {
  dir_.add(kTestPlugins + "/init_error.so");
  HostConfig cfg;
  cfg.plugin_config["init_error"] = "db=";
  LoadError e = load_one_error(std::move(cfg));
  EXPECT_EQ(e.kind, LoadErrorKind::kInitFailed);
  EXPECT_EQ(e.message, path("init_error.so") +
                           " (plugin 'init_error' 6.6.6) failed to initialise (init returned 2): "
                           "init_error needs \"db=<path>\" in its config string, got \"db=\"; "
                           "fix its config string (plugin_config['init_error']) or the plugin, "
                           "or remove the file");
  expect_good_ones_serve();
  EXPECT_EQ(host_->counters().libraries_open, 2u);  // the refused one was closed again
}

TEST_F(BadPluginTest, NonElfFile) {
  std::ofstream(path("notes.so")) << "#!/bin/sh\necho not a plugin\n";
  LoadError e = load_one_error();
  EXPECT_EQ(e.kind, LoadErrorKind::kNotElf);
  EXPECT_EQ(e.message, path("notes.so") +
                           " is not an ELF shared object (it is 28 bytes starting with 23 21 2f "
                           "62, not 7f 45 4c 46): only compiled plugins belong in a plugin "
                           "directory; remove the file or rename it so its name does not end in "
                           ".so");
  expect_good_ones_serve();
}

TEST_F(BadPluginTest, WorldWritableFile) {
  auto so = dir_.add(kExamples + "/fail_throw.so", "writable.so");
  ASSERT_EQ(::chmod(so.c_str(), 0666), 0);
  LoadError e = load_one_error();
  EXPECT_EQ(e.kind, LoadErrorKind::kWorldWritable);
  EXPECT_EQ(e.message, path("writable.so") +
                           " is world-writable (mode 0666): any user could replace the code "
                           "tpoold would run, so it is not loaded; run `chmod o-w " +
                           path("writable.so") + "`");
  expect_good_ones_serve();
  EXPECT_FALSE(host_->find("fail_throw"));
}

TEST_F(BadPluginTest, WorldWritableDirectoryLoadsNothingFromIt) {
  TempDir open_dir;
  open_dir.add(kExamples + "/fail_throw.so");
  ASSERT_EQ(::chmod(open_dir.path().c_str(), 0777), 0);
  HostConfig cfg;
  cfg.dirs = {dir_.str(), open_dir.str()};
  cfg.abort_on_load_error = false;
  cfg.log_sink = log_.sink();
  std::vector<LoadError> errors;
  auto loaded = Host::load(std::move(cfg), &errors);
  ASSERT_TRUE(loaded.ok());
  host_ = std::move(loaded).value();
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_EQ(errors[0].kind, LoadErrorKind::kDirectory);
  EXPECT_EQ(errors[0].message, "plugin directory " + open_dir.str() +
                                   " is world-writable (mode 0777): any user could drop in a .so "
                                   "that tpoold would run, so none of its plugins are loaded; run "
                                   "`chmod o-w " +
                                   open_dir.str() + "`");
  expect_good_ones_serve();
}

TEST_F(BadPluginTest, MissingDirectory) {
  HostConfig cfg;
  cfg.dirs = {dir_.str(), dir_.str() + "/nope"};
  cfg.abort_on_load_error = false;
  std::vector<LoadError> errors;
  auto loaded = Host::load(std::move(cfg), &errors);
  ASSERT_TRUE(loaded.ok());
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_EQ(errors[0].message, "plugin directory " + dir_.str() +
                                   "/nope cannot be read (No such file or directory): create it, "
                                   "or remove it from the configured plugin directories");
}

TEST_F(BadPluginTest, DescriptorSmallerThanAbi10) {
  dir_.add(kTestPlugins + "/bad_size.so");
  LoadError e = load_one_error();
  EXPECT_EQ(e.kind, LoadErrorKind::kBadDescriptor);
  EXPECT_EQ(e.message, path("bad_size.so") +
                           " declares a tpool_plugin of 16 bytes, smaller than "
                           "ABI 1.0's " +
                           std::to_string(sizeof(tpool_plugin)) +
                           ": start the descriptor with TPOOL_PLUGIN_HEADER");
  expect_good_ones_serve();
}

TEST_F(BadPluginTest, InvalidHandlerName) {
  dir_.add(kTestPlugins + "/bad_name.so");
  LoadError e = load_one_error();
  EXPECT_EQ(e.kind, LoadErrorKind::kBadDescriptor);
  EXPECT_EQ(e.message, path("bad_name.so") +
                           " (plugin 'bad_name') handler #0 has an invalid name ('no spaces "
                           "allowed'): use 1 to 64 characters from A-Z a-z 0-9 _ . -");
  expect_good_ones_serve();
}

TEST_F(BadPluginTest, EntryRefusingTheHostIsReportedWithItsLogLine) {
  dir_.add(kTestPlugins + "/refuse.so");
  LoadError e = load_one_error();
  EXPECT_EQ(e.kind, LoadErrorKind::kEntryRefused);
  EXPECT_EQ(e.message, path("refuse.so") +
                           ": tpool_plugin_entry returned NULL (the plugin refused this host, ABI "
                           "1.1; see its log lines above for why)");
  bool attributed = false;
  for (const auto& l : log_.lines()) {
    attributed = attributed || (l.plugin == "refuse.so" && l.level == LogLevel::kError &&
                                l.message.find("refuse: this plugin needs") == 0);
  }
  EXPECT_TRUE(attributed);
  expect_good_ones_serve();
}

TEST_F(BadPluginTest, AllBadOnesAtOnceEachReportedInFileOrder) {
  dir_.add(kTestPlugins + "/no_entry.so");
  dir_.add(kTestPlugins + "/abi_major.so");
  dir_.add(kTestPlugins + "/abi_minor_newer.so");
  dir_.add(kTestPlugins + "/dup_echo.so", "zz_dup_echo.so");
  dir_.add(kTestPlugins + "/init_error.so");
  std::ofstream(path("notes.so")) << "not elf";
  ::chmod(dir_.add(kExamples + "/fail_throw.so", "writable.so").c_str(), 0666);
  HostConfig cfg;
  cfg.dirs = {dir_.str()};
  cfg.abort_on_load_error = false;
  cfg.log_sink = log_.sink();
  std::vector<LoadError> errors;
  auto loaded = Host::load(std::move(cfg), &errors);
  ASSERT_TRUE(loaded.ok());
  host_ = std::move(loaded).value();
  std::vector<LoadErrorKind> kinds;
  for (const auto& e : errors) kinds.push_back(e.kind);
  EXPECT_EQ(kinds, (std::vector<LoadErrorKind>{
                       LoadErrorKind::kAbiMajorMismatch, LoadErrorKind::kAbiMinorNewer,
                       LoadErrorKind::kInitFailed, LoadErrorKind::kNoEntry, LoadErrorKind::kNotElf,
                       LoadErrorKind::kWorldWritable, LoadErrorKind::kDuplicateHandler}));
  expect_good_ones_serve();
}

TEST_F(BadPluginTest, AbortOnLoadErrorIsTheDefaultAndListsEveryError) {
  dir_.add(kTestPlugins + "/abi_major.so");
  dir_.add(kTestPlugins + "/no_entry.so");
  HostConfig cfg;
  cfg.dirs = {dir_.str()};
  cfg.log_sink = log_.sink();
  EXPECT_TRUE(cfg.abort_on_load_error);
  auto loaded = Host::load(std::move(cfg));
  ASSERT_FALSE(loaded.ok());
  const std::string& msg = loaded.status().message();
  EXPECT_EQ(msg.rfind("2 plugin load error(s):\n  " + path("abi_major.so") +
                          " was built against plugin ABI 2.0",
                      0),
            0u)
      << msg;
  EXPECT_NE(msg.find("\n  " + path("no_entry.so") + " does not export"), std::string::npos);
  EXPECT_NE(msg.find("abort_on_load_error is set"), std::string::npos);
}

TEST_F(BadPluginTest, FailedReloadKeepsTheOldPluginsServing) {
  HostConfig cfg;
  cfg.dirs = {dir_.str()};
  cfg.log_sink = log_.sink();
  auto loaded = Host::load(std::move(cfg));
  ASSERT_TRUE(loaded.ok()) << loaded.status().message();
  host_ = std::move(loaded).value();
  dir_.add(kTestPlugins + "/abi_minor_newer.so");
  Status s = host_->reload();
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("the previous plugins keep serving"), std::string::npos);
  ASSERT_EQ(host_->load_errors().size(), 1u);
  EXPECT_EQ(host_->load_errors()[0].kind, LoadErrorKind::kAbiMinorNewer);
  auto c = host_->counters();
  EXPECT_EQ(c.reload_failures, 1u);
  EXPECT_EQ(c.reloads, 0u);
  EXPECT_EQ(c.libraries_open, 2u);    // the new echo and fail were closed again
  EXPECT_EQ(c.libraries_closed, 2u);  // ... after init: fini ran for them
  EXPECT_EQ(host_->find("echo").info().generation, 1u);
  expect_good_ones_serve();
}

}  // namespace
}  // namespace tpool::plugin_host
