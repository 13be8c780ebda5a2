#include "cli/build_progress.h"

#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>

namespace airlock::cli {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

constexpr size_t kTailLines = 5;
constexpr char kReset[] = "\033[0m";
constexpr char kDim[] = "\033[2m";
constexpr char kGreen[] = "\033[32m";
constexpr char kRed[] = "\033[31m";
constexpr char kCyan[] = "\033[36m";

// `s` cut to `width` terminal columns (a UTF-8 code point is one column;
// control characters become blanks).
std::string Fit(const std::string& s, int width) {
  std::string out;
  int cols = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    if ((c & 0xC0) == 0x80) {  // a continuation byte: same column
      out += s[i];
      continue;
    }
    if (cols >= width) break;
    out += c < 0x20 || c == 0x7f ? ' ' : s[i];
    ++cols;
  }
  if (cols < width) out.append(static_cast<size_t>(width - cols), ' ');
  return out;
}

std::string Seconds(Clock::duration d) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1fs", std::chrono::duration<double>(d).count());
  return buf;
}

}  // namespace

BuildProgress::BuildProgress(const std::string& base, const std::vector<std::string>& steps, bool tty, FILE* out)
    : tty_(tty), out_(out) {
  auto add = [&](std::string key, std::string label) {
    Row r;
    r.key = std::move(key);
    r.label = std::move(label);
    rows_.push_back(std::move(r));
  };
  add("base", base);
  for (size_t i = 0; i < steps.size(); ++i) add(std::to_string(i + 1), steps[i]);
  add("finalize", "start command, template snapshot");
}

int BuildProgress::IndexOf(const std::string& step) const {
  for (size_t i = 0; i < rows_.size(); ++i) {
    if (rows_[i].key == step) return static_cast<int>(i);
  }
  return -1;
}

void BuildProgress::Start(int index, bool cached) {
  const auto now = Clock::now();
  for (int i = 0; i < index; ++i) {
    if (rows_[i].state == State::kRunning) {
      rows_[i].state = State::kDone;
      rows_[i].ended = now;
    }
  }
  Row& r = rows_[index];
  if (r.state != State::kPending) return;
  r.state = cached ? State::kCached : State::kRunning;
  r.started = r.ended = now;
}

void BuildProgress::OnLogs(const json& entries) {
  if (!entries.is_array()) return;
  for (const auto& e : entries) {
    if (!e.is_object()) continue;
    const std::string step = e.value("step", std::string());
    const std::string message = e.value("message", std::string());
    log_.emplace_back(step, message);
    if (int i = IndexOf(step); i >= 0) Start(i, message.rfind("CACHED ", 0) == 0);
    if (tty_) {
      tail_.push_back(message);
      if (tail_.size() > kTailLines) tail_.erase(tail_.begin());
    } else {
      std::fprintf(out_, "%s\n", message.c_str());
    }
  }
  if (!tty_) std::fflush(out_);
}

void BuildProgress::OnStatus(const std::string& status, const json& reason) {
  status_ = status;
  const auto now = Clock::now();
  if (status == "ready") {
    for (auto& r : rows_) {
      if (r.state == State::kRunning || r.state == State::kPending) {
        if (r.state == State::kPending) r.started = now;
        r.state = State::kDone;
        r.ended = now;
      }
    }
  } else if (status == "error") {
    const std::string step = reason.is_object() ? reason.value("step", std::string()) : "";
    const int failed = IndexOf(step);
    for (int i = 0; i < static_cast<int>(rows_.size()); ++i) {
      Row& r = rows_[i];
      if (i == failed) {
        if (r.state == State::kPending) r.started = now;
        r.state = State::kFailed;
        r.ended = now;
      } else if (r.state == State::kRunning) {
        r.state = State::kDone;
        r.ended = now;
      }
    }
  }
}

std::string BuildProgress::RowText(const Row& r, int width) const {
  static const char* kSpinner[] = {"⠋", "⠙", "⠹", "⠸", "⠼", "⠴", "⠦", "⠧", "⠇", "⠏"};
  const auto now = Clock::now();
  std::string mark, color, right;
  switch (r.state) {
    case State::kPending:
      mark = "·";
      color = kDim;
      break;
    case State::kRunning: {
      auto frame = std::chrono::duration_cast<std::chrono::milliseconds>(now - t0_).count() / 100;
      mark = kSpinner[frame % 10];
      color = kCyan;
      right = Seconds(now - r.started);
      break;
    }
    case State::kCached:
      mark = "✔";
      color = kDim;
      right = "cached";
      break;
    case State::kDone:
      mark = "✔";
      color = kGreen;
      right = Seconds(r.ended - r.started);
      break;
    case State::kFailed:
      mark = "✘";
      color = kRed;
      right = "failed";
      break;
  }
  const int steps = static_cast<int>(rows_.size()) - 2;
  std::string key = r.key;
  if (key != "base" && key != "finalize") key += "/" + std::to_string(steps);
  constexpr int kKeyWidth = 9, kRightWidth = 9;
  const int label_width = std::max(8, width - 3 - kKeyWidth - 1 - kRightWidth - 1);
  std::string text = color + mark + kReset + " " + Fit(key, kKeyWidth) + " " +
                     (r.state == State::kPending ? std::string(kDim) : "") + Fit(r.label, label_width) + kReset + " ";
  text += color + std::string(static_cast<size_t>(std::max(0, kRightWidth - static_cast<int>(right.size()))), ' ') +
          right + kReset;
  return text;
}

void BuildProgress::Draw(bool final) {
  if (!tty_) return;
  int width = 100, height = 40;
  winsize ws{};
  if (::ioctl(::fileno(out_), TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) {
    width = ws.ws_col;
    height = ws.ws_row > 0 ? ws.ws_row : height;
  }
  width = std::max(width - 1, 30);  // never the last column: no wrap
  std::vector<std::string> lines;
  // As many rows as fit, around the first one not yet finished.
  const int tail = final ? 0 : static_cast<int>(kTailLines);
  const int room = std::max(3, height - 2 - tail);
  int n = static_cast<int>(rows_.size()), first = 0;
  if (n > room) {
    int active = 0;
    while (active < n - 1 && rows_[active].state != State::kPending && rows_[active].state != State::kRunning)
      ++active;
    first = std::clamp(active - room / 2, 0, n - room);
    n = room;
  }
  for (int i = first; i < first + n; ++i) lines.push_back(RowText(rows_[i], width));
  if (!final) {
    for (size_t i = 0; i < kTailLines; ++i)
      lines.push_back(i < tail_.size() ? std::string(kDim) + "  " + Fit(tail_[i], width - 2) + kReset : "");
  }
  std::string out;
  if (drawn_lines_ > 0) out += "\033[" + std::to_string(drawn_lines_) + "F";
  for (const auto& l : lines) out += "\033[2K" + l + "\n";
  out += "\033[J";
  std::fwrite(out.data(), 1, out.size(), out_);
  std::fflush(out_);
  drawn_lines_ = static_cast<int>(lines.size());
}

void BuildProgress::Update() { Draw(false); }

void BuildProgress::Finish() { Draw(true); }

std::vector<std::string> BuildProgress::StepLog(const std::string& step, size_t max) const {
  std::vector<std::string> out;
  for (const auto& [s, m] : log_) {
    if (s == step) out.push_back(m);
  }
  if (out.size() > max) out.erase(out.begin(), out.end() - static_cast<long>(max));
  return out;
}

std::string BuildProgress::Describe(const std::string& step) const {
  int i = IndexOf(step);
  if (i < 0) return step;
  const Row& r = rows_[i];
  if (r.key == "base" || r.key == "finalize") return r.key + " (" + r.label + ")";
  return r.key + "/" + std::to_string(rows_.size() - 2) + " " + r.label;
}

}  // namespace airlock::cli
