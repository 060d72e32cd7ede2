#include "sim/trace/trace_writer.h"

#include <charconv>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>

namespace trnsim::sim {

namespace {

// JSON is written by hand rather than through a DOM: numbers then have one fixed spelling (timestamps are
// integer nanoseconds printed as microseconds with three decimals, so no binary-to-decimal rounding ever
// shows up), events keep the order they are emitted in, and a million slices don't need a million
// temporary objects.

// Appends `text` as a JSON string literal. Bytes that are not valid UTF-8 become U+FFFD so the output
// is valid JSON whatever the input (instruction names and operands come from user kernels).
void append_string(std::string& out, const std::string& text) {
  out += '"';
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  size_t i = 0;
  while (i < n) {
    const unsigned char c = s[i];
    if (c < 0x80) {
      switch (c) {
        case '"': out += "\\\""; break;
        case '\\': out += "\\\\"; break;
        case '\b': out += "\\b"; break;
        case '\f': out += "\\f"; break;
        case '\n': out += "\\n"; break;
        case '\r': out += "\\r"; break;
        case '\t': out += "\\t"; break;
        default:
          if (c < 0x20) {
            char buffer[8];
            std::snprintf(buffer, sizeof buffer, "\\u%04x", c);
            out += buffer;
          } else {
            out += char(c);
          }
      }
      ++i;
      continue;
    }
    // Length of the sequence and the allowed range of its second byte (excludes overlongs, surrogates
    // and code points above U+10FFFF).
    size_t length = 0;
    unsigned char second_low = 0x80, second_high = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) {
      length = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
      length = 3;
      if (c == 0xE0) second_low = 0xA0;
      if (c == 0xED) second_high = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      length = 4;
      if (c == 0xF0) second_low = 0x90;
      if (c == 0xF4) second_high = 0x8F;
    }
    bool valid = length != 0 && i + length <= n && s[i + 1] >= second_low && s[i + 1] <= second_high;
    for (size_t k = 2; valid && k < length; ++k) valid = (s[i + k] & 0xC0) == 0x80;
    if (valid) {
      out.append(text, i, length);
      i += length;
    } else {
      out += "\\ufffd";
      ++i;
    }
  }
  out += '"';
}

// Nanoseconds rounded to an integer; the trace's resolution. Non-finite times (a model bug) become 0
// rather than invalid JSON.
int64_t to_ns(double ns) { return std::isfinite(ns) ? std::llround(ns) : 0; }

// Integer nanoseconds as microseconds with exactly three decimals.
void append_us(std::string& out, int64_t ns) {
  char buffer[32];
  const uint64_t magnitude = ns < 0 ? uint64_t(0) - uint64_t(ns) : uint64_t(ns);
  std::snprintf(buffer, sizeof buffer, "%s%" PRIu64 ".%03" PRIu64, ns < 0 ? "-" : "", magnitude / 1000,
                magnitude % 1000);
  out += buffer;
}

// Shortest decimal that reads back to the same double (std::to_chars), so the same value always
// prints the same way; non-finite values have no JSON spelling and become null.
void append_double(std::string& out, double value) {
  if (!std::isfinite(value)) {
    out += "null";
    return;
  }
  char buffer[64];
  auto result = std::to_chars(buffer, buffer + sizeof buffer, value);
  out.append(buffer, result.ptr);
}

// True when `text` is a JSON number literal (and a finite double), so it can be written unquoted.
bool is_json_number(const std::string& text) {
  size_t i = 0;
  const size_t n = text.size();
  auto digits = [&] {
    size_t start = i;
    while (i < n && text[i] >= '0' && text[i] <= '9') ++i;
    return i > start;
  };
  if (i < n && text[i] == '-') ++i;
  if (i < n && text[i] == '0') {
    ++i;
  } else if (i < n && text[i] >= '1' && text[i] <= '9') {
    digits();
  } else {
    return false;
  }
  if (i < n && text[i] == '.') {
    ++i;
    if (!digits()) return false;
  }
  if (i < n && (text[i] == 'e' || text[i] == 'E')) {
    ++i;
    if (i < n && (text[i] == '+' || text[i] == '-')) ++i;
    if (!digits()) return false;
  }
  return i == n && std::isfinite(std::strtod(text.c_str(), nullptr));
}

void append_int(std::string& out, int64_t value) {
  char buffer[24];
  auto result = std::to_chars(buffer, buffer + sizeof buffer, value);
  out.append(buffer, result.ptr);
}

// Trace pids/tids start at 1: some viewers treat pid/tid 0 as the idle "swapper" task.
int64_t pid_of(int process) { return int64_t{process} + 1; }
int64_t tid_of(int track) { return int64_t{track} + 1; }

void append_metadata(std::string& out, const char* name, int64_t pid, int64_t tid, const char* key,
                     const std::string* text, int number) {
  out += "{\"name\":\"";
  out += name;
  out += "\",\"ph\":\"M\",\"pid\":";
  append_int(out, pid);
  out += ",\"tid\":";
  append_int(out, tid);
  out += ",\"args\":{\"";
  out += key;
  out += "\":";
  if (text != nullptr) {
    append_string(out, *text);
  } else {
    append_int(out, number);
  }
  out += "}}";
}

}  // namespace

int TraceWriter::add_process(const std::string& name, int sort_index) {
  m_processes.push_back(Named{name, sort_index, -1});
  return int(m_processes.size()) - 1;
}

int TraceWriter::add_track(int process, const std::string& name, int sort_index) {
  if (process < 0 || size_t(process) >= m_processes.size()) throw std::out_of_range("trace: unknown process");
  m_tracks.push_back(Named{name, sort_index, process});
  return int(m_tracks.size()) - 1;
}

int64_t TraceWriter::slice(int process, int track, double start_ns, double duration_ns, const std::string& name,
                           const std::vector<std::pair<std::string, std::string>>& args) {
  if (track < 0 || size_t(track) >= m_tracks.size() || m_tracks[track].process != process) {
    throw std::out_of_range("trace: track " + std::to_string(track) + " is not a track of process " +
                            std::to_string(process));
  }
  m_slices.push_back(Slice{process, track, start_ns, duration_ns, name, args});
  return int64_t(m_slices.size()) - 1;
}

int TraceWriter::find_or_add_process(const std::string& name, int sort_index) {
  for (size_t p = 0; p < m_processes.size(); ++p)
    if (m_processes[p].name == name) return int(p);
  return add_process(name, sort_index);
}

int TraceWriter::find_or_add_track(int process, const std::string& name, int sort_index) {
  for (size_t t = 0; t < m_tracks.size(); ++t)
    if (m_tracks[t].process == process && m_tracks[t].name == name) return int(t);
  return add_track(process, name, sort_index);
}

void TraceWriter::append(const TraceWriter& other, double offset_ns, const std::string& process_prefix,
                         int process_sort_base) {
  std::vector<int> process_map, track_map;
  for (const Named& p : other.m_processes)
    process_map.push_back(find_or_add_process(process_prefix + p.name, process_sort_base + p.sort_index));
  for (const Named& t : other.m_tracks)
    track_map.push_back(find_or_add_track(process_map[size_t(t.process)], t.name, t.sort_index));
  const auto slice_base = int64_t(m_slices.size());
  for (const Slice& s : other.m_slices) {
    m_slices.push_back(Slice{process_map[size_t(s.process)], track_map[size_t(s.track)], s.start_ns + offset_ns,
                             s.duration_ns, s.name, s.args});
  }
  for (const Flow& f : other.m_flows) m_flows.push_back(Flow{f.from + slice_base, f.to + slice_base, f.name});
  for (const Counter& c : other.m_counters)
    m_counters.push_back(Counter{process_map[size_t(c.process)], c.name, c.time_ns + offset_ns, c.value});
}

void TraceWriter::flow(int64_t from, int64_t to, const std::string& name) {
  const auto count = int64_t(m_slices.size());
  if (from < 0 || from >= count || to < 0 || to >= count) throw std::out_of_range("trace: flow between unknown slices");
  m_flows.push_back(Flow{from, to, name});
}

void TraceWriter::counter(int process, const std::string& name, double time_ns, double value) {
  if (process < 0 || size_t(process) >= m_processes.size()) throw std::out_of_range("trace: unknown process");
  m_counters.push_back(Counter{process, name, time_ns, value});
}

void TraceWriter::write(std::ostream& out) const {
  std::string text;
  text.reserve((1u << 20) + 4096);
  // Events are written in chunks so a large trace never needs one string of its full size.
  auto flush_if_large = [&] {
    if (text.size() >= (1u << 20)) {
      out.write(text.data(), std::streamsize(text.size()));
      text.clear();
    }
  };
  text += "{\"traceEvents\":[";
  // One event per line; the separator goes before each event, so chunks can be flushed at any event.
  bool first = true;
  auto next_event = [&] {
    text += first ? "\n" : ",\n";
    first = false;
  };

  // Metadata first: names and UI order of processes (cores) and threads (engines, DMA queues).
  for (size_t p = 0; p < m_processes.size(); ++p) {
    next_event();
    append_metadata(text, "process_name", pid_of(int(p)), 0, "name", &m_processes[p].name, 0);
    next_event();
    append_metadata(text, "process_sort_index", pid_of(int(p)), 0, "sort_index", nullptr, m_processes[p].sort_index);
  }
  for (size_t t = 0; t < m_tracks.size(); ++t) {
    const int64_t pid = pid_of(m_tracks[t].process), tid = tid_of(int(t));
    next_event();
    append_metadata(text, "thread_name", pid, tid, "name", &m_tracks[t].name, 0);
    next_event();
    append_metadata(text, "thread_sort_index", pid, tid, "sort_index", nullptr, m_tracks[t].sort_index);
  }

  // Slices in the order they were added. Start and end are rounded to ns separately, so slices that
  // touch in the model touch in the trace (rounding a duration could make neighbours overlap).
  for (const Slice& s : m_slices) {
    const int64_t start = to_ns(s.start_ns), end = std::max(start, to_ns(s.start_ns + s.duration_ns));
    next_event();
    text += "{\"name\":";
    append_string(text, s.name);
    text += ",\"ph\":\"X\",\"pid\":";
    append_int(text, pid_of(s.process));
    text += ",\"tid\":";
    append_int(text, tid_of(s.track));
    text += ",\"ts\":";
    append_us(text, start);
    text += ",\"dur\":";
    append_us(text, end - start);
    text += ",\"args\":{";
    for (size_t i = 0; i < s.args.size(); ++i) {
      if (i > 0) text += ',';
      append_string(text, s.args[i].first);
      text += ':';
      if (is_json_number(s.args[i].second)) {
        text += s.args[i].second;
      } else {
        append_string(text, s.args[i].second);
      }
    }
    text += "}}";
    flush_if_large();
  }

  // Flows after all slices, so a viewer has seen both ends' slices when it binds them. Both ends bind
  // to the enclosing slice ("bp":"e"). The start sits on the last nanosecond inside `from` rather than
  // on its end: a slice that begins exactly where `from` ends on the same track would otherwise enclose
  // the point too, and viewers disagree on which one wins.
  for (size_t f = 0; f < m_flows.size(); ++f) {
    const Slice& from = m_slices[size_t(m_flows[f].from)];
    const Slice& to = m_slices[size_t(m_flows[f].to)];
    const int64_t from_start = to_ns(from.start_ns);
    const int64_t from_end = std::max(from_start, to_ns(from.start_ns + from.duration_ns));
    const int64_t at = from_end > from_start ? from_end - 1 : from_start;
    for (int end = 0; end < 2; ++end) {
      const Slice& s = end == 0 ? from : to;
      next_event();
      text += "{\"name\":";
      append_string(text, m_flows[f].name);
      text += end == 0 ? ",\"cat\":\"dependency\",\"ph\":\"s\",\"bp\":\"e\",\"id\":"
                       : ",\"cat\":\"dependency\",\"ph\":\"f\",\"bp\":\"e\",\"id\":";
      append_int(text, int64_t(f) + 1);
      text += ",\"pid\":";
      append_int(text, pid_of(s.process));
      text += ",\"tid\":";
      append_int(text, tid_of(s.track));
      text += ",\"ts\":";
      append_us(text, end == 0 ? at : to_ns(to.start_ns));
      text += "}";
    }
    flush_if_large();
  }

  for (const Counter& c : m_counters) {
    next_event();
    text += "{\"name\":";
    append_string(text, c.name);
    text += ",\"ph\":\"C\",\"pid\":";
    append_int(text, pid_of(c.process));
    text += ",\"ts\":";
    append_us(text, to_ns(c.time_ns));
    text += ",\"args\":{\"value\":";
    append_double(text, c.value);
    text += "}}";
    flush_if_large();
  }

  text += "\n],\n\"displayTimeUnit\":\"ns\"}\n";
  out.write(text.data(), std::streamsize(text.size()));
}

}  // namespace trnsim::sim
