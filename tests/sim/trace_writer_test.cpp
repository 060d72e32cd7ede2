// TraceWriter: the Chrome-trace JSON parses, carries the metadata, slices, flows and counters in a
// fixed order, binds flows to the right slices, escapes names and args, and is byte-for-byte stable.
#include "sim/trace/trace_writer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>

namespace trnsim::sim {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

std::string render(const TraceWriter& w) {
  std::ostringstream out;
  w.write(out);
  return out.str();
}

// The X event of the slice named `name` (the first one).
const json& slice_named(const json& events, const std::string& name) {
  for (const json& e : events) {
    if (e["ph"] == "X" && e["name"] == name) return e;
  }
  throw std::runtime_error("no slice " + name);
}

// A two-core trace: engines as tracks, a DMA feeding a matmul (a flow), a counter.
TraceWriter sample() {
  TraceWriter w;
  int core0 = w.add_process("core 0", 0);
  int core1 = w.add_process("core 1", 1);
  int pe = w.add_track(core0, "TensorMatrix", 0);
  int dma = w.add_track(core0, "qSyncIO0", 5);
  int act = w.add_track(core1, "Activation", 2);
  int64_t load = w.slice(core0, dma, 100, 250.4, "dma_copy", {{"bytes", "65536"}, {"src", "x[0:128, 0:512]"}});
  int64_t mm = w.slice(core0, pe, 350.4, 64, "nc_matmul", {{"dtype", "bf16"}, {"flops", "1.6e7"}});
  int64_t next = w.slice(core0, dma, 350.4, 10, "dma_copy", {});  // starts exactly where `load` ends
  w.slice(core1, act, 0.0004, 1e6, "activation", {});
  w.flow(load, mm, "RAW");
  w.flow(mm, next, "WAR");
  w.counter(core0, "pending DMAs", 100, 1);
  w.counter(core0, "pending DMAs", 350.4, 0.1);
  return w;
}

TEST(TraceWriter, ParsesWithMetadataFirstThenSlicesFlowsCounters) {
  const json trace = json::parse(render(sample()));
  EXPECT_EQ(trace["displayTimeUnit"], "ns");
  const json& events = trace["traceEvents"];
  ASSERT_TRUE(events.is_array());
  ASSERT_EQ(events.size(), 4u + 6u + 4u + 4u + 2u);  // 2 processes, 3 tracks (2 events each), 4 X, 2x2 flow, 2 C

  // Processes: name then sort index, in the order added; pids start at 1.
  EXPECT_EQ(events[0], json::parse(R"({"name":"process_name","ph":"M","pid":1,"tid":0,"args":{"name":"core 0"}})"));
  EXPECT_EQ(events[1],
            json::parse(R"({"name":"process_sort_index","ph":"M","pid":1,"tid":0,"args":{"sort_index":0}})"));
  EXPECT_EQ(events[2]["args"]["name"], "core 1");
  EXPECT_EQ(events[3]["args"]["sort_index"], 1);
  // Tracks: thread_name / thread_sort_index under their process, tids unique across processes.
  EXPECT_EQ(events[4], json::parse(R"({"name":"thread_name","ph":"M","pid":1,"tid":1,"args":{"name":"TensorMatrix"}})"));
  EXPECT_EQ(events[7], json::parse(R"({"name":"thread_sort_index","ph":"M","pid":1,"tid":2,"args":{"sort_index":5}})"));
  EXPECT_EQ(events[8]["pid"], 2);
  EXPECT_EQ(events[8]["tid"], 3);
  EXPECT_EQ(events[8]["args"]["name"], "Activation");

  // Slices in insertion order.
  std::vector<std::string> phases;
  for (const json& e : events) phases.push_back(e["ph"]);
  EXPECT_EQ(std::vector<std::string>(phases.begin() + 10, phases.end()),
            (std::vector<std::string>{"X", "X", "X", "X", "s", "f", "s", "f", "C", "C"}));
  const json& load = events[10];
  EXPECT_EQ(load["name"], "dma_copy");
  EXPECT_EQ(load["pid"], 1);
  EXPECT_EQ(load["tid"], 2);
  EXPECT_DOUBLE_EQ(load["ts"].get<double>(), 0.1);
  EXPECT_DOUBLE_EQ(load["dur"].get<double>(), 0.25);  // ends at 350 ns (350.4 rounds to 350)
  EXPECT_EQ(load["args"]["bytes"], 65536);            // numbers stay numbers
  EXPECT_EQ(load["args"]["src"], "x[0:128, 0:512]");
  EXPECT_DOUBLE_EQ(slice_named(events, "nc_matmul")["args"]["flops"].get<double>(), 1.6e7);
  EXPECT_EQ(slice_named(events, "activation")["ts"], 0);

  // Counters.
  EXPECT_EQ(events[18], json::parse(R"({"name":"pending DMAs","ph":"C","pid":1,"ts":0.1,"args":{"value":1}})"));
  EXPECT_DOUBLE_EQ(events[19]["args"]["value"].get<double>(), 0.1);
}

TEST(TraceWriter, TimesAreMicrosecondsWithThreeDecimals) {
  const std::string text = render(sample());
  EXPECT_THAT(text, HasSubstr(R"("ts":0.100,"dur":0.250,)"));
  EXPECT_THAT(text, HasSubstr(R"("ts":0.350,"dur":0.064,)"));
  EXPECT_THAT(text, HasSubstr(R"("ts":0.000,"dur":1000.000,)"));
  EXPECT_THAT(text, HasSubstr(R"("pid":1,"ts":0.350,"args":{"value":0.1}})"));
}

TEST(TraceWriter, FlowsBindToTheRightSlices) {
  const json events = json::parse(render(sample()))["traceEvents"];
  const json& load = events[10];
  const json& mm = events[11];
  const json& next = events[12];
  const json& start = events[14];
  const json& finish = events[15];
  EXPECT_EQ(start["name"], "RAW");
  EXPECT_EQ(start["ph"], "s");
  EXPECT_EQ(finish["ph"], "f");
  EXPECT_EQ(start["id"], finish["id"]);
  EXPECT_EQ(start["cat"], finish["cat"]);
  EXPECT_EQ(start["bp"], "e");
  EXPECT_EQ(finish["bp"], "e");
  // Start: on the producer's track, inside it, at its last nanosecond: not at 350 ns, where `next` begins
  // on the same track and would enclose the point as well.
  EXPECT_EQ(start["pid"], load["pid"]);
  EXPECT_EQ(start["tid"], load["tid"]);
  EXPECT_DOUBLE_EQ(start["ts"].get<double>(), 0.349);
  EXPECT_GE(start["ts"].get<double>(), load["ts"].get<double>());
  EXPECT_LT(start["ts"].get<double>(), load["ts"].get<double>() + load["dur"].get<double>());
  // Finish: at the start of the consumer, on its track.
  EXPECT_EQ(finish["pid"], mm["pid"]);
  EXPECT_EQ(finish["tid"], mm["tid"]);
  EXPECT_EQ(finish["ts"], mm["ts"]);
  // The second flow has its own id and goes from the matmul back to the DMA queue.
  EXPECT_NE(events[16]["id"], start["id"]);
  EXPECT_EQ(events[16]["tid"], mm["tid"]);
  EXPECT_EQ(events[17]["tid"], next["tid"]);
  EXPECT_EQ(events[17]["ts"], next["ts"]);
}

TEST(TraceWriter, EscapesNamesAndArgs) {
  TraceWriter w;
  int p = w.add_process("core \"0\"\n", 0);
  int t = w.add_track(p, "back\\slash\ttab", 0);
  const std::string unicode = "\xC2\xB5s \xE2\x9C\x93 \xF0\x9F\x9A\x80";  // "µs ✓ 🚀"
  w.slice(p, t, 0, 1, "say \"hi\"\r\n" + unicode,
          {{"quote\"key", "line1\nline2"},
           {"control", std::string("a\x01z\x1f", 4)},
           {"invalid utf-8", "\xFF\xC0\xAF ok \xED\xA0\x80"},
           {"truncated", "\xE2\x9C"},
           {"hex", "0x10"},
           {"leading zero", "01"},
           {"nan", "nan"},
           {"huge", "1e999"},
           {"negative", "-2.5E-3"},
           {"empty", ""}});
  w.counter(p, "a\"b", 0, 2);
  const std::string text = render(w);
  const json trace = json::parse(text);  // throws on invalid JSON
  const json& events = trace["traceEvents"];
  EXPECT_EQ(events[0]["args"]["name"], "core \"0\"\n");
  EXPECT_EQ(events[2]["args"]["name"], "back\\slash\ttab");
  const json& s = events[4];
  EXPECT_EQ(s["name"], "say \"hi\"\r\n" + unicode);
  EXPECT_EQ(s["args"]["quote\"key"], "line1\nline2");
  EXPECT_EQ(s["args"]["control"], std::string("a\x01z\x1f", 4));
  EXPECT_EQ(s["args"]["invalid utf-8"], "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD ok \xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_EQ(s["args"]["truncated"], "\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_EQ(s["args"]["hex"], "0x10");
  EXPECT_EQ(s["args"]["leading zero"], "01");
  EXPECT_EQ(s["args"]["nan"], "nan");
  EXPECT_EQ(s["args"]["huge"], "1e999");
  EXPECT_DOUBLE_EQ(s["args"]["negative"].get<double>(), -2.5e-3);
  EXPECT_EQ(s["args"]["empty"], "");
  EXPECT_EQ(events[5]["name"], "a\"b");
  // Control characters are written as escapes, valid UTF-8 as itself.
  EXPECT_THAT(text, HasSubstr(R"(a\u0001z\u001f)"));
  EXPECT_THAT(text, HasSubstr(unicode));
}

TEST(TraceWriter, OutputIsDeterministic) {
  const std::string first = render(sample());
  EXPECT_EQ(render(sample()), first);
  TraceWriter w = sample();
  EXPECT_EQ(render(w), render(w));
}

TEST(TraceWriter, EmptyTraceIsValid) {
  TraceWriter w;
  const json trace = json::parse(render(w));
  EXPECT_TRUE(trace["traceEvents"].empty());
  EXPECT_EQ(w.slice_count(), 0u);
}

TEST(TraceWriter, RejectsUnknownIds) {
  TraceWriter w;
  int p = w.add_process("core 0", 0);
  int q = w.add_process("core 1", 1);
  int t = w.add_track(p, "Pool", 0);
  EXPECT_THROW(w.add_track(7, "x", 0), std::out_of_range);
  EXPECT_THROW(w.slice(q, t, 0, 1, "wrong process", {}), std::out_of_range);
  int64_t s = w.slice(p, t, 0, 1, "ok", {});
  EXPECT_THROW(w.flow(s, s + 1, "dangling"), std::out_of_range);
  EXPECT_THROW(w.counter(-1, "c", 0, 0), std::out_of_range);
  EXPECT_EQ(w.slice_count(), 1u);
}

TEST(TraceWriter, LargeTraceStreamsInChunks) {
  TraceWriter w;
  int p = w.add_process("core 0", 0);
  int t = w.add_track(p, "Activation", 0);
  for (int i = 0; i < 50000; ++i) w.slice(p, t, i * 10.0, 10.0, "act", {{"i", std::to_string(i)}});
  for (int i = 1; i < 50000; ++i) w.flow(i - 1, i, "dep");
  const std::string text = render(w);
  EXPECT_GT(text.size(), size_t{4} << 20);  // well past the 1 MiB flush threshold
  const json trace = json::parse(text);
  EXPECT_EQ(trace["traceEvents"].size(), 4u + 50000u + 2u * 49999u);
}

}  // namespace
}  // namespace trnsim::sim
