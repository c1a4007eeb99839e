// The daemon's lifecycle phase (daemon/server/src/phase.h): only the edges
// of starting -> serving -> draining -> stopping -> stopped (and starting ->
// stopped when start fails) are taken; every other move is refused with a
// sentence and leaves the phase where it was.
#include "phase.h"

#include <gtest/gtest.h>

#include <array>
#include <utility>

namespace tpool::server {
namespace {

constexpr std::array kAll = {Phase::kStarting, Phase::kServing, Phase::kDraining, Phase::kStopping,
                             Phase::kStopped};

TEST(Phase, TheLifecycleIsExactlyTheDiagram) {
  const std::array<std::pair<Phase, Phase>, 5> edges = {{{Phase::kStarting, Phase::kServing},
                                                         {Phase::kStarting, Phase::kStopped},
                                                         {Phase::kServing, Phase::kDraining},
                                                         {Phase::kDraining, Phase::kStopping},
                                                         {Phase::kStopping, Phase::kStopped}}};
  for (Phase from : kAll) {
    for (Phase to : kAll) {
      bool edge = false;
      for (const auto& e : edges) edge = edge || (e.first == from && e.second == to);
      EXPECT_EQ(legal_transition(from, to), edge) << to_string(from) << " -> " << to_string(to);
    }
  }
}

TEST(Phase, ARunWalksTheDiagram) {
  PhaseCell p;
  EXPECT_EQ(p.load(), Phase::kStarting);
  EXPECT_TRUE(p.transition(Phase::kStarting, Phase::kServing).ok());
  EXPECT_TRUE(p.transition(Phase::kServing, Phase::kDraining).ok());
  EXPECT_TRUE(p.transition(Phase::kDraining, Phase::kStopping).ok());
  EXPECT_TRUE(p.transition(Phase::kStopping, Phase::kStopped).ok());
  EXPECT_EQ(p.load(), Phase::kStopped);
  EXPECT_EQ(to_string(p.load()), "stopped");
}

TEST(Phase, AFailedStartStops) {
  PhaseCell p;
  EXPECT_TRUE(p.transition(Phase::kStarting, Phase::kStopped).ok());
  EXPECT_EQ(p.load(), Phase::kStopped);
}

TEST(Phase, AnIllegalTransitionIsRefusedAndSaysSo) {
  PhaseCell p;
  ASSERT_TRUE(p.transition(Phase::kStarting, Phase::kServing).ok());
  // Skipping the drain: not an edge.
  Status s = p.transition(Phase::kServing, Phase::kStopped);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("illegal daemon phase transition serving -> stopped"),
            std::string::npos)
      << s.message();
  EXPECT_EQ(p.load(), Phase::kServing);
}

TEST(Phase, ATransitionFromAnotherPhaseIsRefused) {
  PhaseCell p;
  // A legal edge, but the daemon is not in `from`: a second drain, say.
  Status s = p.transition(Phase::kServing, Phase::kDraining);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("(the daemon is starting)"), std::string::npos) << s.message();
  EXPECT_EQ(p.load(), Phase::kStarting);
  EXPECT_TRUE(p.transition(Phase::kStarting, Phase::kServing).ok());
  EXPECT_TRUE(p.transition(Phase::kServing, Phase::kDraining).ok());
  EXPECT_FALSE(p.transition(Phase::kServing, Phase::kDraining).ok());
  EXPECT_EQ(p.load(), Phase::kDraining);
}

}  // namespace
}  // namespace tpool::server
