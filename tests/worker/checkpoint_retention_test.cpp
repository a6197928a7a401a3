// Unit tests for worker/checkpoint_store and worker/checkpoint_resume: a save keeps the newest K
// step-<N>.qckpt files with latest.qckpt as the newest's second name; a resume falls back from a
// corrupt or truncated newest checkpoint to the next older one with a warning naming the file and
// the cause, fails naming every file when none is usable, and makes all ranks (two threads over
// an in-process all_gather) resume from the same step when their files differ.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "kernels/device_class.h"
#include "planner/atomic_file.h"
#include "worker/checkpoint_resume.h"
#include "worker/checkpoint_store.h"

namespace qsync {
namespace {

namespace fs = std::filesystem;

void activate_test_class() { device_class_activate(device_class_fallback(device_class_by_name("cpu-amx")), 1); }

struct TempDir {
  fs::path path;
  TempDir() {
    path = fs::temp_directory_path() / ("qsync_checkpoint_retention_" + std::to_string(getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
  std::string file(const std::string& name) const { return (path / name).string(); }
};

ModelDesc tiny_model() {
  return model_desc_parse(
      "name: tiny\ntask: classification\ninput: {kind: image, shape: [1, 4, 4]}\nclasses: 3\nlayers:\n"
      "  - {name: flatten, type: flatten}\n  - {name: fc1, type: linear, out: 8}\n"
      "  - {name: act1, type: relu}\n  - {name: fc2, type: linear, out: 3}\n",
      "tiny.yaml");
}

// A model, its optimizer and their memory account; weights set from a seed.
struct Trainee {
  ModelDesc desc = tiny_model();
  MemoryAccount memory;
  Model model{desc, &memory, 1};
  Optimizer opt{OptimizerConfig{}, model.parameters(), &memory};
  void randomize(uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> n(0.0f, 1.0f);
    for (Parameter* p : model.parameters())
      for (int64_t i = 0; i < p->value.numel(); ++i) p->value.f32()[i] = n(rng);
  }
  // Saves weights drawn from seed `step` as the checkpoint of `step`; returns their hash.
  uint64_t save(const std::string& dir, int64_t step, int64_t keep = 2) {
    randomize(uint64_t(step));
    checkpoint_save_kept(dir, keep, model, opt, {step, 0, step, 1, desc.hash, {}});
    return model.weight_hash();
  }
};

std::vector<std::string> names_in(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

void flip_byte_in_the_middle(const std::string& path) {
  std::string bytes = file_read_all(path);
  bytes[bytes.size() / 2] = char(bytes[bytes.size() / 2] ^ 0x5a);
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;  // in place: latest.qckpt too when linked
}

void cut_in_half(const std::string& path) { fs::resize_file(path, fs::file_size(path) / 2); }

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

TEST(CheckpointStore, SavesKeepTheNewestKAndLatestIsTheNewest) {
  activate_test_class();
  TempDir dir;
  Trainee t;
  for (int64_t step : {5, 10, 15, 20}) t.save(dir.path.string(), step);
  EXPECT_EQ(names_in(dir.path.string()), (std::vector<std::string>{"latest.qckpt", "step-15.qckpt", "step-20.qckpt"}));
  EXPECT_EQ(file_read_all(dir.file("latest.qckpt")), file_read_all(dir.file("step-20.qckpt")));
  EXPECT_EQ(checkpoint_step(dir.file("latest.qckpt")), 20);
  for (int64_t step : {25, 30, 35}) t.save(dir.path.string(), step, 3);
  EXPECT_EQ(names_in(dir.path.string()),
            (std::vector<std::string>{"latest.qckpt", "step-25.qckpt", "step-30.qckpt", "step-35.qckpt"}));
  t.save(dir.path.string(), 40, 1);
  EXPECT_EQ(names_in(dir.path.string()), (std::vector<std::string>{"latest.qckpt", "step-40.qckpt"}));
}

TEST(CheckpointStore, StaleFilesAreRemovedLaterStepsAndAnEarlierRunsOlderOnes) {
  activate_test_class();
  TempDir dir;
  Trainee t;
  for (int64_t step : {5, 10, 15}) t.save(dir.path.string(), step, 3);
  // A run resumed from step 5 saves step 10 again: step 15 is of the run it abandoned.
  t.randomize(99);
  CheckpointSaved saved = checkpoint_save_kept(dir.path.string(), 3, t.model, t.opt, {10, 0, 10, 1, t.desc.hash, {}});
  EXPECT_EQ(saved.removed_stale, std::vector<std::string>{dir.file("step-15.qckpt")});
  EXPECT_TRUE(saved.removed_older.empty());
  EXPECT_EQ(names_in(dir.path.string()), (std::vector<std::string>{"latest.qckpt", "step-10.qckpt", "step-5.qckpt"}));
  EXPECT_EQ(checkpoint_step(dir.file("latest.qckpt")), 10);
  // A run from scratch whose first save is step 7: steps 5 and 10 are an earlier run's.
  saved = checkpoint_save_kept(dir.path.string(), 3, t.model, t.opt, {7, 0, 7, 1, t.desc.hash, {}}, 7);
  EXPECT_EQ(saved.removed_stale.size(), 2u);
  EXPECT_EQ(names_in(dir.path.string()), (std::vector<std::string>{"latest.qckpt", "step-7.qckpt"}));
  saved = checkpoint_save_kept(dir.path.string(), 3, t.model, t.opt, {14, 0, 14, 1, t.desc.hash, {}}, 7);
  EXPECT_TRUE(saved.removed_stale.empty());
  EXPECT_EQ(names_in(dir.path.string()), (std::vector<std::string>{"latest.qckpt", "step-14.qckpt", "step-7.qckpt"}));
}

TEST(CheckpointStore, ListsOnlyStepFilesNewestFirstElseLatest) {
  activate_test_class();
  TempDir dir;
  Trainee t;
  checkpoint_save(checkpoint_path(dir.path.string()), t.model, t.opt, {7, 0, 7, 1, t.desc.hash, {}});
  std::vector<CheckpointFile> files = checkpoint_files(dir.path.string());
  ASSERT_EQ(files.size(), 1u) << "a directory from before retention: latest.qckpt alone";
  EXPECT_EQ(files[0].step, -1);
  EXPECT_EQ(files[0].path, checkpoint_path(dir.path.string()));
  for (const char* junk : {"step-x.qckpt", "step-.qckpt", "step-5.qckpt.bak", ".step-9.qckpt.tmp-1-0-0", "step-+3.qckpt"})
    std::ofstream(dir.file(junk)) << "junk";
  for (const char* step_file : {"step-5.qckpt", "step-40.qckpt", "step-10.qckpt"}) std::ofstream(dir.file(step_file)) << "x";
  files = checkpoint_files(dir.path.string());
  ASSERT_EQ(files.size(), 3u);
  EXPECT_EQ(files[0].step, 40);
  EXPECT_EQ(files[1].step, 10);
  EXPECT_EQ(files[2].step, 5);
  EXPECT_EQ(files[1].path, dir.file("step-10.qckpt"));
  EXPECT_TRUE(checkpoint_files(dir.file("missing")).empty());
}

// One rank, the single-rank collectives.
struct SingleResume {
  std::vector<std::string> warnings;
  ResumePoint point;
  std::string error;
};
SingleResume resume_alone(const std::string& dir, Trainee& t) {
  SingleResume r;
  const std::unique_ptr<Collectives> coll = collectives_local();
  try {
    r.point = checkpoint_resume(dir, t.model, t.opt, *coll, [&](const std::string& w) { r.warnings.push_back(w); });
  } catch (const std::exception& e) {
    r.error = e.what();
  }
  return r;
}

void expect_falls_back_from_damaged_newest(const std::function<void(const std::string&)>& damage, const std::string& cause) {
  activate_test_class();
  TempDir dir;
  Trainee writer;
  const uint64_t step5 = writer.save(dir.path.string(), 5);
  writer.save(dir.path.string(), 10);
  damage(dir.file("step-10.qckpt"));
  Trainee reader;
  const SingleResume r = resume_alone(dir.path.string(), reader);
  ASSERT_EQ(r.error, "");
  ASSERT_TRUE(r.point.found);
  EXPECT_EQ(r.point.meta.step, 5);
  EXPECT_EQ(r.point.path, dir.file("step-5.qckpt"));
  EXPECT_EQ(reader.model.weight_hash(), step5) << "the weights are step 5's";
  ASSERT_EQ(r.warnings.size(), 1u);
  EXPECT_TRUE(contains(r.warnings[0], dir.file("step-10.qckpt"))) << r.warnings[0];
  EXPECT_TRUE(contains(r.warnings[0], cause)) << r.warnings[0];
  EXPECT_TRUE(contains(r.warnings[0], "next older")) << r.warnings[0];
}

TEST(CheckpointResume, CorruptNewestResumesFromTheOlderOne) {
  expect_falls_back_from_damaged_newest(flip_byte_in_the_middle, "checksum mismatch");
}

TEST(CheckpointResume, TruncatedNewestResumesFromTheOlderOne) {
  expect_falls_back_from_damaged_newest(cut_in_half, "truncated");
}

TEST(CheckpointResume, EveryCheckpointDamagedFailsNamingEachFileAndItsCause) {
  activate_test_class();
  TempDir dir;
  Trainee writer;
  writer.save(dir.path.string(), 5);
  writer.save(dir.path.string(), 10);
  flip_byte_in_the_middle(dir.file("step-10.qckpt"));
  cut_in_half(dir.file("step-5.qckpt"));
  Trainee reader;
  const uint64_t before = reader.model.weight_hash();
  const SingleResume r = resume_alone(dir.path.string(), reader);
  EXPECT_FALSE(r.point.found);
  for (const std::string& part : {dir.file("step-10.qckpt") + " is corrupt (checksum mismatch)",
                                  dir.file("step-5.qckpt") + " is truncated", std::string("tried 2"),
                                  std::string("restore a good copy"), std::string("train from scratch")})
    EXPECT_TRUE(contains(r.error, part)) << "'" << part << "' in: " << r.error;
  EXPECT_EQ(reader.model.weight_hash(), before) << "refused files changed the weights";
}

TEST(CheckpointResume, NoCheckpointStartsFromScratchAndLatestAloneStillResumes) {
  activate_test_class();
  TempDir dir;
  Trainee t;
  EXPECT_FALSE(resume_alone(dir.path.string(), t).point.found);
  EXPECT_FALSE(resume_alone(dir.file("missing"), t).point.found);
  EXPECT_EQ(resume_alone(dir.file("missing"), t).error, "");
  // A directory written before retention: latest.qckpt only.
  Trainee writer;
  writer.randomize(3);
  checkpoint_save(checkpoint_path(dir.path.string()), writer.model, writer.opt, {30, 0, 30, 1, writer.desc.hash, {}});
  const SingleResume r = resume_alone(dir.path.string(), t);
  ASSERT_TRUE(r.point.found) << r.error;
  EXPECT_EQ(r.point.meta.step, 30);
  EXPECT_EQ(t.model.weight_hash(), writer.model.weight_hash());
}

// All ranks of an in-process world, each a thread: all_gather meets at a generation barrier
// (30 s without the others: CollectiveError). The other collectives are not used by a resume.
class ThreadWorld {
 public:
  explicit ThreadWorld(int world) : world_(world), slots_(size_t(world)) {}
  std::vector<uint64_t> gather(int rank, uint64_t value) {
    std::unique_lock<std::mutex> lock(mutex_);
    slots_[size_t(rank)] = value;
    const uint64_t generation = generation_;
    if (++arrived_ == world_) {
      result_ = slots_;
      arrived_ = 0;
      ++generation_;
      changed_.notify_all();
    } else if (!changed_.wait_for(lock, std::chrono::seconds(30), [&] { return generation_ != generation; })) {
      throw CollectiveError("test world: rank " + std::to_string(rank) + " waited 30 s for the others");
    }
    return result_;
  }
  int world() const { return world_; }

 private:
  int world_;
  std::mutex mutex_;
  std::condition_variable changed_;
  int arrived_ = 0;
  uint64_t generation_ = 0;
  std::vector<uint64_t> slots_, result_;
};

class ThreadRank final : public Collectives {
 public:
  ThreadRank(ThreadWorld& w, int rank) : world_(w), rank_(rank) {}
  const char* backend() const override { return "test-threads"; }
  int rank() const override { return rank_; }
  int world_size() const override { return world_.world(); }
  void all_gather(const uint64_t* in, uint64_t* out, int64_t count) override {
    for (int64_t i = 0; i < count; ++i) {
      const std::vector<uint64_t> all = world_.gather(rank_, in[i]);
      for (size_t r = 0; r < all.size(); ++r) out[int64_t(r) * count + i] = all[r];
    }
  }
  void all_reduce_sum(float*, int64_t) override { unused(); }
  void all_reduce_sum(double*, int64_t) override { unused(); }
  void broadcast(float*, int64_t, int) override { unused(); }
  void barrier() override { unused(); }

 private:
  [[noreturn]] static void unused() { throw std::logic_error("checkpoint_resume uses all_gather only"); }
  ThreadWorld& world_;
  int rank_;
};

// Each rank resumes from its own directory; results by rank.
std::vector<SingleResume> resume_ranks(const std::vector<std::string>& dirs) {
  ThreadWorld world(int(dirs.size()));
  std::vector<SingleResume> results(dirs.size());
  std::vector<Trainee> trainees(dirs.size());
  std::vector<std::thread> threads;
  for (size_t r = 0; r < dirs.size(); ++r)
    threads.emplace_back([&, r] {
      ThreadRank coll(world, int(r));
      try {
        results[r].point = checkpoint_resume(dirs[r], trainees[r].model, trainees[r].opt, coll,
                                             [&](const std::string& w) { results[r].warnings.push_back(w); });
      } catch (const std::exception& e) {
        results[r].error = e.what();
      }
    });
  for (std::thread& t : threads) t.join();
  return results;
}

// Rank 1's newest is corrupt, rank 2 lacks it: rank 0, whose newest is good, goes back with them.
TEST(CheckpointResume, RanksResumeFromTheNewestStepGoodOnEveryRank) {
  activate_test_class();
  TempDir dir;
  std::vector<std::string> dirs = {dir.file("r0"), dir.file("r1"), dir.file("r2")};
  Trainee writer;
  for (const std::string& d : dirs)
    for (int64_t step : {5, 10, 15}) writer.save(d, step, 3);
  flip_byte_in_the_middle(dirs[1] + "/step-15.qckpt");
  fs::remove(dirs[2] + "/step-15.qckpt");
  cut_in_half(dirs[2] + "/step-10.qckpt");
  const std::vector<SingleResume> r = resume_ranks(dirs);
  for (size_t rank = 0; rank < r.size(); ++rank) {
    SCOPED_TRACE("rank " + std::to_string(rank));
    ASSERT_EQ(r[rank].error, "");
    ASSERT_TRUE(r[rank].point.found);
    EXPECT_EQ(r[rank].point.meta.step, 5);
  }
  ASSERT_EQ(r[0].warnings.size(), 2u);
  EXPECT_TRUE(contains(r[0].warnings[0], "step-15.qckpt loaded here, but ranks 1, 2 could not use step 15")) << r[0].warnings[0];
  EXPECT_TRUE(contains(r[0].warnings[1], "step-10.qckpt loaded here, but rank 2 could not use step 10")) << r[0].warnings[1];
  EXPECT_TRUE(contains(r[1].warnings[0], "checksum mismatch")) << r[1].warnings[0];
  EXPECT_TRUE(contains(r[2].warnings[0], "step-15.qckpt is missing on rank 2")) << r[2].warnings[0];
  EXPECT_TRUE(contains(r[2].warnings[1], "truncated")) << r[2].warnings[1];
}

TEST(CheckpointResume, RanksFailTogetherWhenNoStepIsGoodEverywhere) {
  activate_test_class();
  TempDir dir;
  std::vector<std::string> dirs = {dir.file("r0"), dir.file("r1")};
  Trainee writer;
  writer.save(dirs[0], 5);
  writer.save(dirs[0], 10);
  writer.save(dirs[1], 10);
  flip_byte_in_the_middle(dirs[1] + "/step-10.qckpt");
  const std::vector<SingleResume> r = resume_ranks(dirs);
  EXPECT_FALSE(r[0].point.found);
  EXPECT_FALSE(r[1].point.found);
  EXPECT_TRUE(contains(r[0].error, "step-10.qckpt loaded here, but rank 1 could not use step 10")) << r[0].error;
  EXPECT_TRUE(contains(r[0].error, "step-5.qckpt loaded here, but rank 1 could not use step 5")) << r[0].error;
  EXPECT_TRUE(contains(r[1].error, "checksum mismatch")) << r[1].error;
  EXPECT_TRUE(contains(r[1].error, "step-5.qckpt is missing on rank 1")) << r[1].error;
}

}  // namespace
}  // namespace qsync
