// File: tests/worker/dist/gradient_sync_test.cpp
// HostGradientSync's two threads: the compute thread writes each layer's gradients and marks
// them ready (in backward order) while the communication thread sums the buckets already
// complete; finish_step() waits for all of them. A stand-in for two identical ranks sums by
// doubling the bucket in place, so the communication thread reads and writes what the compute
// thread handed over (what ThreadSanitizer checks in scripts/sanitize.sh tsan). Every step's
// gradients come back exactly doubled (small integers: exact in float), over many steps and
// small buckets (one to a few parameters each).
#include <gtest/gtest.h>

#include <set>
#include <vector>

#include "kernels/device_class.h"
#include "planner/model_desc.h"
#include "worker/dist/collectives.h"
#include "worker/dist/gradient_sync.h"
#include "worker/model.h"

namespace qsync {
namespace {

// Sums as two ranks holding the same values would: x + x.
class TwoIdenticalRanks : public Collectives {
 public:
  const char* backend() const override { return "local"; }
  int rank() const override { return 0; }
  int world_size() const override { return 2; }
  void all_reduce_sum(float* data, int64_t count) override {
    for (int64_t i = 0; i < count; ++i) data[i] += data[i];
  }
  void all_reduce_sum(double* data, int64_t count) override {
    for (int64_t i = 0; i < count; ++i) data[i] += data[i];
  }
  void broadcast(float*, int64_t, int) override {}
  void all_gather(const uint64_t* in, uint64_t* out, int64_t count) override {
    for (int64_t i = 0; i < count; ++i) out[i] = out[count + i] = in[i];
  }
  void barrier() override {}
};

TEST(HostGradientSync, BucketsSumWhileBackwardGoesOnAndEveryStepIsComplete) {
  device_class_activate(device_class_fallback(device_class_by_name("cpu-avx2")), 1);
  const ModelDesc desc = model_desc_parse(
      "name: sync-test\ntask: classification\ninput: {kind: image, shape: [1, 4, 4]}\nclasses: 3\n"
      "layers:\n  - {name: flatten, type: flatten}\n  - {name: fc1, type: linear, out: 12}\n  - {name: act1, type: relu}\n"
      "  - {name: fc2, type: linear, out: 10}\n  - {name: act2, type: relu}\n  - {name: fc3, type: linear, out: 3}\n",
      "sync-test.yaml");
  MemoryAccount memory;
  Model model(desc, &memory, 1);
  TwoIdenticalRanks ranks;
  HostGradientSync sync(ranks, model, /*bucket_bytes=*/64);  // about one parameter a bucket
  ASSERT_GE(sync.bucket_count(), 4);
  std::vector<Layer*> layers;
  model.visit_layers([&](Layer& l) { layers.push_back(&l); });
  for (int step = 1; step <= 200; ++step) {
    sync.begin_step();
    std::set<Parameter*> written;
    for (auto it = layers.rbegin(); it != layers.rend(); ++it) {  // backward order
      std::vector<Parameter*> params;
      (*it)->collect_parameters(params);
      for (Parameter* p : params)
        if (written.insert(p).second)
          for (int64_t i = 0; i < p->grad.numel(); ++i) p->grad.f32()[i] = float(step + i % 7);
      sync.layer_backward_done(**it);
    }
    sync.finish_step();
    for (Parameter* p : model.parameters())
      for (int64_t i = 0; i < p->grad.numel(); ++i)
        ASSERT_EQ(p->grad.f32()[i], 2.0f * float(step + i % 7)) << p->name << "[" << i << "] at step " << step;
  }
}

}  // namespace
}  // namespace qsync
