// The placement planner (L7): the plans it finds against every assignment
// tried on small cases, the headroom kept, runs split over nodes when memory
// forces it, several models, and the errors.
#include "engine/placement.h"

#include <gtest/gtest.h>

#include <random>

#include "testing/mem_file_system.h"

namespace strata::engine {
namespace {

constexpr uint64_t kGiB = 1ull << 30;

// `n` nodes of the given memory, SLIT distance 10 to themselves and
// `remote` (or 10 + 10·|i − j| when 0) between them.
Topology Nodes(std::vector<uint64_t> memory, int32_t remote = 0) {
  Topology t;
  for (size_t i = 0; i < memory.size(); ++i) {
    t.nodes.push_back({.id = static_cast<int32_t>(i), .memory_bytes = memory[i], .cpus = {}});
  }
  t.distance.assign(memory.size(), std::vector<int32_t>(memory.size(), 10));
  for (size_t i = 0; i < memory.size(); ++i) {
    for (size_t j = 0; j < memory.size(); ++j) {
      if (i != j) {
        t.distance[i][j] =
            remote > 0 ? remote : 10 + 10 * static_cast<int32_t>(i > j ? i - j : j - i);
      }
    }
  }
  return t;
}

PlacementModel Model(std::string name, std::vector<uint64_t> stage_bytes,
                     uint64_t boundary = 8192) {
  PlacementModel m{.name = std::move(name), .stages = {}, .boundary_bytes = boundary};
  for (size_t i = 0; i < stage_bytes.size(); ++i) {
    m.stages.push_back({.name = "blk." + std::to_string(i), .bytes = stage_bytes[i]});
  }
  return m;
}

TEST(Placement, AModelThatFitsOneNodeStaysOnTheRoomiestAndCrossesNothing) {
  const Topology t = Nodes({64 * kGiB, 128 * kGiB});
  const PlacementModel m = Model("small", std::vector<uint64_t>(10, kGiB));
  auto plan = PlanPlacement(t, std::span(&m, 1));
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  ASSERT_EQ(plan->models[0].runs.size(), 1u);
  EXPECT_EQ(plan->models[0].runs[0].node, 1u);
  EXPECT_EQ(plan->models[0].cross_node_bytes_per_token, 0u);
  EXPECT_TRUE(plan->models[0].exact);
}

TEST(Placement, ALargeModelIsSplitOnceWithTheHeadroomKept) {
  // 2, 4 and 8 nodes of uneven memory; a model bigger than any one node.
  for (const std::vector<uint64_t>& memory :
       {std::vector<uint64_t>{48 * kGiB, 32 * kGiB},
        std::vector<uint64_t>{16 * kGiB, 48 * kGiB, 24 * kGiB, 32 * kGiB},
        std::vector<uint64_t>{8 * kGiB, 16 * kGiB, 8 * kGiB, 40 * kGiB, 8 * kGiB, 16 * kGiB,
                              24 * kGiB, 8 * kGiB}}) {
    const Topology t = Nodes(memory);
    const PlacementModel m = Model("large", std::vector<uint64_t>(40, kGiB + kGiB / 4));  // 50 GiB
    auto plan = PlanPlacement(t, std::span(&m, 1));
    ASSERT_TRUE(plan.ok()) << memory.size() << " nodes: " << plan.status().ToString();
    const ModelPlacement& p = plan->models[0];
    EXPECT_TRUE(p.exact);
    EXPECT_GE(p.runs.size(), 2u);
    EXPECT_EQ(p.cross_node_bytes_per_token, (p.runs.size() - 1) * m.boundary_bytes);
    // Every stage placed once, in order.
    size_t next = 0;
    for (const PlacedRun& r : p.runs) {
      EXPECT_EQ(r.first, next);
      next = r.end;
    }
    EXPECT_EQ(next, m.stages.size());
    for (size_t i = 0; i < memory.size(); ++i) {
      EXPECT_LE(static_cast<double>(plan->node_bytes[i]) * 1.2, static_cast<double>(memory[i]))
          << "node " << i << " of " << memory.size();
    }
  }
}

TEST(Placement, AModelOverSixOfEightNodesIsProvedFewestCrossings) {
  // 70 GiB in 82 stages on 8 nodes of 16 GiB (13.3 GiB each with headroom):
  // five nodes hold 66.7 GiB, so six runs, five crossings, and the search
  // proves no plan has fewer.
  const Topology t = Nodes(std::vector<uint64_t>(8, 16 * kGiB), 21);
  const PlacementModel m = Model("70b", std::vector<uint64_t>(82, (70 * kGiB) / 82), 32768);
  auto plan = PlanPlacement(t, std::span(&m, 1));
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_TRUE(plan->models[0].exact);
  EXPECT_EQ(plan->models[0].runs.size(), 6u);
  EXPECT_EQ(plan->models[0].cross_node_bytes_per_token, 5u * 32768);
  EXPECT_EQ(plan->models[0].distance, 5 * 21);
}

TEST(Placement, MemoryCanForceTwoRunsOnOneNode) {
  // 4 + 8 + 4 on two nodes of 8: only A, B, A fits.
  const Topology t = Nodes({8, 8});
  const PlacementModel m = Model("tight", {4, 8, 4});
  PlacementOptions o;
  o.headroom = 1.0;
  auto plan = PlanPlacement(t, std::span(&m, 1), o);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  ASSERT_EQ(plan->models[0].runs.size(), 3u);
  EXPECT_EQ(plan->models[0].runs[0].node, plan->models[0].runs[2].node);
  EXPECT_EQ(plan->models[0].cross_node_bytes_per_token, 2 * m.boundary_bytes);
}

TEST(Placement, TheSearchFindsWhatTryingEveryAssignmentFinds) {
  std::mt19937 rng(7);
  int feasible = 0;
  for (int trial = 0; trial < 400; ++trial) {
    const size_t n = 2 + rng() % 2;       // 2 or 3 nodes
    const size_t stages = 2 + rng() % 6;  // 2 to 7 stages
    std::vector<uint64_t> memory(n);
    for (uint64_t& m : memory) m = 10 + rng() % 60;
    Topology t = Nodes(memory);
    for (size_t i = 0; i < n; ++i) {
      for (size_t j = i + 1; j < n; ++j) {
        t.distance[i][j] = t.distance[j][i] = 11 + static_cast<int32_t>(rng() % 30);
      }
    }
    std::vector<uint64_t> bytes(stages);
    for (uint64_t& b : bytes) b = 1 + rng() % 20;
    const PlacementModel m = Model("m", bytes);
    const double headroom = 1.0 + 0.1 * static_cast<double>(rng() % 4);
    PlacementOptions o;
    o.headroom = headroom;
    auto searched = PlanPlacement(t, std::span(&m, 1), o);
    auto every = PlanPlacementExhaustively(t, m, headroom);
    ASSERT_EQ(searched.ok(), every.ok()) << "trial " << trial;
    if (!every.ok()) {
      EXPECT_EQ(searched.status().code(), util::StatusCode::kResourceExhausted);
      continue;
    }
    ++feasible;
    const ModelPlacement& a = searched->models[0];
    EXPECT_EQ(a.cross_node_bytes_per_token, every->cross_node_bytes_per_token) << "trial " << trial;
    EXPECT_EQ(a.distance, every->distance) << "trial " << trial;
  }
  EXPECT_GT(feasible, 100);  // the cases are not all refusals
}

TEST(Placement, SeveralModelsShareTheNodes) {
  const Topology t = Nodes({60 * kGiB, 60 * kGiB});
  const std::vector<PlacementModel> models = {Model("a", std::vector<uint64_t>(10, 2 * kGiB)),
                                              Model("b", std::vector<uint64_t>(10, 4 * kGiB))};
  auto plan = PlanPlacement(t, models);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  ASSERT_EQ(plan->models.size(), 2u);
  EXPECT_EQ(plan->models[0].model, "a");
  EXPECT_EQ(plan->models[1].model, "b");
  // Each fits one node: the larger takes one, the smaller the other.
  EXPECT_EQ(plan->models[0].runs.size(), 1u);
  EXPECT_EQ(plan->models[1].runs.size(), 1u);
  EXPECT_NE(plan->models[0].runs[0].node, plan->models[1].runs[0].node);
  EXPECT_EQ(plan->node_bytes[0] + plan->node_bytes[1], 60 * kGiB);
}

TEST(Placement, WhatCannotBePlacedIsRefusedClearly) {
  const Topology t = Nodes({8 * kGiB, 8 * kGiB});
  const PlacementModel big = Model("big", std::vector<uint64_t>(20, kGiB));
  auto refused = PlanPlacement(t, std::span(&big, 1));
  ASSERT_EQ(refused.status().code(), util::StatusCode::kResourceExhausted);
  EXPECT_NE(refused.status().message().find("'big'"), std::string::npos);
  EXPECT_NE(refused.status().message().find("headroom"), std::string::npos);

  Topology bad = t;
  bad.distance[0][1] = 30;  // not symmetric
  EXPECT_EQ(PlanPlacement(bad, std::span(&big, 1)).status().code(),
            util::StatusCode::kInvalidArgument);
  EXPECT_EQ(PlanPlacement(Topology{}, std::span(&big, 1)).status().code(),
            util::StatusCode::kInvalidArgument);
  const PlacementModel empty = Model("empty", {});
  EXPECT_EQ(PlanPlacement(t, std::span(&empty, 1)).status().code(),
            util::StatusCode::kInvalidArgument);
}

TEST(NumaTopology, ReadsWhatLinuxDescribes) {
  testing::MemFileSystem fs;
  const std::string root = "/sys/devices/system/node";
  fs.Put(root + "/online", "0-1\n");
  fs.Put(root + "/node0/meminfo", "Node 0 MemTotal:       65536 kB\nNode 0 MemFree: 1 kB\n");
  fs.Put(root + "/node0/cpulist", "0-3,8-11\n");
  fs.Put(root + "/node0/distance", "10 21\n");
  fs.Put(root + "/node1/meminfo", "Node 1 MemTotal:       32768 kB\n");
  fs.Put(root + "/node1/cpulist", "4-7\n");
  fs.Put(root + "/node1/distance", "21 10\n");
  auto t = ReadNumaTopology(fs, root);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  ASSERT_EQ(t->nodes.size(), 2u);
  EXPECT_EQ(t->nodes[0].memory_bytes, 65536u * 1024);
  EXPECT_EQ(t->nodes[0].cpus, (std::vector<int32_t>{0, 1, 2, 3, 8, 9, 10, 11}));
  EXPECT_EQ(t->nodes[1].cpus.size(), 4u);
  EXPECT_EQ(t->distance, (std::vector<std::vector<int32_t>>{{10, 21}, {21, 10}}));

  fs.Put(root + "/node1/distance", "21\n");  // a row short
  EXPECT_EQ(ReadNumaTopology(fs, root).status().code(), util::StatusCode::kDataLoss);
  testing::MemFileSystem none;
  EXPECT_EQ(ReadNumaTopology(none, root).status().code(), util::StatusCode::kNotFound);
  // Without a NUMA description the machine is one node of /proc/meminfo.
  none.Put("/proc/meminfo", "MemTotal:       2048 kB\nMemFree: 1 kB\n");
  auto one = ReadMachineTopology(none, 3, root);
  ASSERT_TRUE(one.ok()) << one.status().ToString();
  ASSERT_EQ(one->nodes.size(), 1u);
  EXPECT_EQ(one->nodes[0].memory_bytes, 2048u * 1024);
  EXPECT_EQ(one->nodes[0].cpus, (std::vector<int32_t>{0, 1, 2}));
  EXPECT_EQ(ReadMachineTopology(fs, 3, root).status().code(), util::StatusCode::kDataLoss);
  EXPECT_FALSE(ParseCpuList("3-1").ok());
  EXPECT_FALSE(ParseCpuList("a").ok());
  EXPECT_TRUE(ParseCpuList("")->empty());
}

}  // namespace
}  // namespace strata::engine
