// File: tests/operator/controller/shutdown_signal_test.cpp
// ShutdownSignal: request() wakes waiters; SIGTERM and SIGINT, once handlers are installed, do too.
#include "operator/controller/shutdown_signal.h"

#include <gtest/gtest.h>

#include <signal.h>

#include <future>

namespace qsync::controller {
namespace {

using std::chrono::milliseconds;

TEST(ShutdownSignal, RequestWakesWaiters) {
  ShutdownSignal signal;
  EXPECT_FALSE(signal.requested());
  EXPECT_FALSE(signal.wait_for(milliseconds(20)));
  auto waiter = std::async(std::launch::async, [&] { signal.wait(); });
  signal.request();
  ASSERT_EQ(waiter.wait_for(std::chrono::seconds(5)), std::future_status::ready);
  EXPECT_TRUE(signal.requested());
  EXPECT_TRUE(signal.wait_for(milliseconds(0)));
}

TEST(ShutdownSignal, SigtermRequestsShutdown) {
  ShutdownSignal signal;
  signal.install_signal_handlers();
  ASSERT_EQ(raise(SIGTERM), 0);
  EXPECT_TRUE(signal.wait_for(std::chrono::seconds(5)));
}

TEST(ShutdownSignal, SigintRequestsShutdownAndHandlersCanBeReinstalledAfterwards) {
  {
    ShutdownSignal signal;
    signal.install_signal_handlers();
    ShutdownSignal another;
    EXPECT_THROW(another.install_signal_handlers(), std::logic_error) << "one object per process owns the signals";
    ASSERT_EQ(raise(SIGINT), 0);
    EXPECT_TRUE(signal.wait_for(std::chrono::seconds(5)));
  }
  ShutdownSignal later;
  EXPECT_NO_THROW(later.install_signal_handlers());
}

TEST(ShutdownSignalDeathTest, SecondSignalExitsAtOnce) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        ShutdownSignal signal;
        signal.install_signal_handlers();
        raise(SIGTERM);
        raise(SIGTERM);
        std::this_thread::sleep_for(std::chrono::seconds(5));
        std::exit(0);
      },
      testing::ExitedWithCode(1), "");
}

}  // namespace
}  // namespace qsync::controller
