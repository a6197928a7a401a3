// File: tests/operator/reconciler/operator_flags_test.cpp
// qsync-operator's flags as the Helm chart passes them: `--flag value`, `--flag=value`, booleans.
#include <gtest/gtest.h>

#include "operator/reconciler/operator_flags.h"

namespace qsync::reconciler {
namespace {

TEST(OperatorFlags, ChartArguments) {
  const OperatorFlags f = parse_operator_flags({"--namespace", "team", "--leader-elect=true", "--leader-election-namespace",
                                                "qsync-system", "--leader-election-id", "qsync", "--metrics-port", "8080",
                                                "--health-port=8081", "--workers", "4", "--qps", "20", "--burst", "30",
                                                "--worker-image", "ghcr.io/qsync/qsync-worker:dev", "--master-port=29600",
                                                "--prometheus-url", "http://prometheus.monitoring:9090"});
  EXPECT_EQ(f.namespace_, "team");
  EXPECT_TRUE(f.leader_elect);
  EXPECT_EQ(f.leader_election_namespace, "qsync-system");
  EXPECT_EQ(f.leader_election_id, "qsync");
  EXPECT_EQ(f.metrics_port, 8080);
  EXPECT_EQ(f.health_port, 8081);
  EXPECT_EQ(f.workers, 4);
  EXPECT_EQ(f.qps, 20);
  EXPECT_EQ(f.burst, 30);
  EXPECT_EQ(f.worker_image, "ghcr.io/qsync/qsync-worker:dev");
  EXPECT_EQ(f.master_port, 29600);
  EXPECT_EQ(f.prometheus_url, "http://prometheus.monitoring:9090");
}

TEST(OperatorFlags, BooleansAndDefaults) {
  EXPECT_FALSE(parse_operator_flags({}).leader_elect);
  EXPECT_TRUE(parse_operator_flags({"--leader-elect"}).leader_elect);
  EXPECT_FALSE(parse_operator_flags({"--leader-elect=false"}).leader_elect);
  EXPECT_FALSE(parse_operator_flags({"--leader-elect", "false"}).leader_elect);
  EXPECT_EQ(parse_operator_flags({"--metrics-port", "-1"}).metrics_port, -1);
  EXPECT_EQ(parse_operator_flags({}).master_port, 29500);
  EXPECT_FALSE(parse_operator_flags({}).gpu_ranks_on_cpu);
  EXPECT_TRUE(parse_operator_flags({"--gpu-ranks-on-cpu"}).gpu_ranks_on_cpu);
  EXPECT_TRUE(parse_operator_flags({"--gpu-ranks-on-cpu", "--workers", "2"}).gpu_ranks_on_cpu);
  EXPECT_FALSE(parse_operator_flags({"--gpu-ranks-on-cpu=false"}).gpu_ranks_on_cpu);
  EXPECT_EQ(parse_operator_flags({"--gpu-worker-image", "qsync-worker-cuda:dev"}).gpu_worker_image, "qsync-worker-cuda:dev");
  EXPECT_EQ(parse_operator_flags({}).gpu_worker_image, "");
  EXPECT_EQ(parse_operator_flags({}).gang_scheduler_name, "");
  EXPECT_EQ(parse_operator_flags({"--gang-scheduler-name", "coscheduler"}).gang_scheduler_name, "coscheduler");
}

TEST(OperatorFlags, GpuTolerationsAreAJsonList) {
  EXPECT_EQ(parse_operator_flags({}).gpu_tolerations, nlohmann::json::array());
  const auto f = parse_operator_flags({R"(--gpu-tolerations=[{"key":"nvidia.com/gpu","operator":"Exists","effect":"NoSchedule"}])"});
  ASSERT_EQ(f.gpu_tolerations.size(), 1u);
  EXPECT_EQ(f.gpu_tolerations[0]["key"], "nvidia.com/gpu");
  EXPECT_THROW(parse_operator_flags({"--gpu-tolerations", "nvidia.com/gpu"}), std::invalid_argument);
  EXPECT_THROW(parse_operator_flags({"--gpu-tolerations", R"([{"key":"k","hostNetwork":true}])"}), std::invalid_argument);
}

TEST(OperatorFlags, ErrorsNameTheFlag) {
  EXPECT_THROW(parse_operator_flags({"--workers", "four"}), std::invalid_argument);
  EXPECT_THROW(parse_operator_flags({"--workers", "0"}), std::invalid_argument);
  EXPECT_THROW(parse_operator_flags({"--leader-elect=maybe"}), std::invalid_argument);
  EXPECT_THROW(parse_operator_flags({"--qps"}), std::invalid_argument);
  try {
    parse_operator_flags({"--frobnicate"});
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("--frobnicate"), std::string::npos);
  }
}

}  // namespace
}  // namespace qsync::reconciler
