// File: planner/shared_cpu_model.h
// Ranks that share CPUs (a local pool of more threads than CPUs, or unpinned): what the replayer
// does not model. replay_step times each rank as if it had its CPUs alone; sharing them, the
// ranks' compute is a processor-sharing queue, and its span is at least the ranks' total CPU work
// over the CPUs (the scheduler keeps every CPU busy while any rank computes) and at least the
// slowest rank's own. So the step is the replay's with its slowest compute C_max replaced by
//
//   span = work_scale * max(C_max, sum_r C_r * threads_r / cpus)
//
// (C_r: rank r's replayed compute, forward + backward + optimizer), what follows it (the sync's
// tail, the stats all-reduce) kept as replayed. The replay's expected latest arrival of ranks
// whose steps vary (StepPrediction::jitter_seconds) is dropped: sharing, the ranks' step-to-step
// spread is the scheduler interleaving them, inside the span (kept, it over-predicted balanced
// plans by 8-19% on 2 CPUs: the CNN's 4-rank exact plan 97.8 ms against 83.0 measured). The
// profiles' costs were measured under the profiling world's own sharing; work_scale brings them to the
// span's scale, fitted so that the uniform FP32 plan at the profiles' batches gives the step the
// profiling world measured (DeviceProfile::world_step_seconds). A mixed plan that lightens the
// weak ranks frees CPU time for the others. Measured on 2 CPUs (MLP and CNN, pools of 3 and 4
// ranks, 16 held-out plans, docs/results.md): median error 3.4%, worst 10.5%, where scaling the
// whole replayed step by the uniform plan's ratio gave 8.8% and 14.4%; on one set of profiles
// both ways, the span 3.9% and 9.3% against the ratio's 5.7% and 13.4%. Tried and left: an exact
// processor-sharing queue (every computing rank at min(1, cpus / its peers' threads) of its speed,
// an early finisher's CPU going to the others) over the profiles scaled back to each rank's CPUs
// alone by inverting that queue on each profiling turn's per-rank compute. On the 24 plans of 3
// and 4 ranks on 2 CPUs of one prediction run (2026-12-07) it mended the 3-rank CNN whose weak
// ranks lighten (batch-moved +14.1 -> +8.8%, uniform weak int8-all +19.7 -> +16.5%) but put the
// 4-rank CNN and the MLP further off (the 4-rank CNN's batch-moved -1.4 -> -9.4%, the MLP's
// uniform weak int8-all -8.7 -> -10.6%), presumably as ranks waiting at the sync do not give
// their CPU back as fully as the queue assumes (Gloo's waits, OpenMP's spinning team).
// Where the worst rows come from (cpu-avx2 + 2 x cpu-sse41, a thread each, on 2 CPUs; measured
// 2026-12-07): the MLP's step with the weak ranks at int8-all (16.5 ms) is each rank's compute,
// about 5 ms, then the all-reduce of its 7.45 MB, 5-8 ms, where the comm profile of the same three
// ranks, otherwise idle, says 3.3; the fit puts that excess into work_scale (1.08), so a plan that
// lightens the ranks shrinks it too: -10%. The CNN's (weak int8-all, 78.8 measured, 91.0
// predicted) is the other way: its profiled costs are means over preempted steps (cpu-avx2 FP32
// at 43 samples: 73.7 ms against 43.8 alone), and ranks that balance (43.8 / 47.7 / 46.9 ms
// alone) share the CPUs better than the profiling world did. A span over the ranks' alone costs
// times a factor, plus the replayed tail and a constant, both fitted on two measured worlds
// (uniform FP32 and every rank at int8-all), put the MLP's rows within 3.5% but left the CNN's
// weak int8-all at +9.8%; it would also need alone costs (CPU time per op) and a second world in
// the profile. Left. Tried on a Zen 4 (2026-12-08, a noisier host: the same configuration's rounds
// spread 10-24% at the median): each op's cost as the rank thread's CPU time in the profiling world
// (CLOCK_THREAD_CPUTIME_ID, the ranks at one thread each), its alone cost, with the span and its
// fit as above. The 24 plans of 3 and 4 ranks, a run of each clock one after the other, twice:
// median error 5.3% against the wall clock's 6.6% and worst 17.7% against 26.8% (every row
// under-predicted, -0.2..-17.7%, the wall clock's -7..+27%), then, with rounds spreading 19% and
// 24%, 8.6% against 6.1% and 26.1% against 28.2%. Noise either way on this host: it needs pairs
// on a quieter machine before it could replace the wall clock. Left.
//
//   std::optional<SharedCpus> s = shared_cpus_fit(model, pool, threads, cpus, comm, bucket_bytes, world);
//   StepPrediction p = replay_step(model, ranks, comm, bucket_bytes);
//   if (s) share_cpus(p, *s);
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "planner/device_profile.h"
#include "planner/model_desc.h"
#include "planner/replayer.h"

namespace qsync {

struct SharedCpus {
  int cpus = 0;              // the CPUs the ranks share (> 0)
  std::vector<int> threads;  // each rank's compute threads (>= 1), in rank order
  double work_scale = 1;     // the profiled compute to the span's scale (> 0)
  // The world's measured FP32 step over its replay: how much longer than replayed a plan like the
  // uniform one steps, for turning a step target into the replay's units (the allocator plans in
  // them).
  double uniform_ratio = 1;
};

// The ranks' compute span on the shared CPUs (the formula above) for a replayed step.
double shared_compute_span(const StepPrediction& p, const SharedCpus& s);

// Replaces p's slowest compute and its jitter by the span: the step and every rank's step move by
// the difference; the ranks' compute stays as replayed and the difference is waiting (never
// below 0); jitter_seconds becomes 0.
void share_cpus(StepPrediction& p, const SharedCpus& s);

// Fits work_scale from the pool's profiles measured in world `world` (world_size the pool's,
// world_signature `world`): their median world_step_seconds against share_cpus over the replay of
// the uniform FP32 plan at the profiles' batches. None where no profile of the pool was measured
// in that world, or where the replay's tail alone exceeds the measured step. Throws
// std::invalid_argument for a rank without a profile, threads not one per rank, or no CPUs.
std::optional<SharedCpus> shared_cpus_fit(const ModelDesc& model, const std::vector<const DeviceProfile*>& pool,
                                          const std::vector<int>& threads, int cpus, const CommProfile& comm,
                                          int64_t bucket_bytes, const std::string& world);

}  // namespace qsync
