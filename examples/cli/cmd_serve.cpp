// dsv41 serve: an OpenAI-compatible HTTP server (cpp-httplib). /v1/chat/completions (SSE streaming or
// not, reasoning_content, tool calls), /v1/completions, /v1/models, /health (503 while loading), /metrics.
// --health-port: /health and /metrics also on a second listener with its own two workers, for probes.
// Requests share engine steps (runtime/text_engine.hpp, continuous batching): one thread steps, each HTTP
// request reads its own bounded output queue, so a slow or gone client costs the others nothing. Bad requests
// get 4xx JSON errors and never stop the server; SIGTERM drains.
// Sessions (on by default, CPU): prompts resume from stored blocks; a chat request may name its session with the
// extension field "session_id" (echoed in the response).
#include <algorithm>
#include <atomic>
#include <cmath>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cerrno>
#include <cstring>
#include <malloc.h>
#include <dirent.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <cstdlib>
#include <deque>
#include <map>
#include <set>
#include <filesystem>
#include <functional>
#include <list>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

#include <fmt/core.h>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include <dsv41/core/utf8.hpp>
#include <dsv41/runtime/generation_config.hpp>
#include <dsv41/text/tool_call_stream.hpp>
#include <dsv41/vision/image_decode.hpp>
#include <dsv41/vision/image_processor.hpp>

#include "commands.hpp"
#include "server_request.hpp"
#include "text_loader.hpp"

namespace dsv41::cli {
namespace {

using ojson = nlohmann::ordered_json;

struct ServeOpts {
  LoadArgs load;
  std::string host = "127.0.0.1", name;
  int port = 8080;
  int health_port = 0;            // a second listener for /health and /metrics only (0: none)
  int max_tokens_cap = 4096;
  int load_delay_ms = 0;  // tests: keep /health at 503 this long
  SessionArgs sessions;
  std::string api_key;            // empty: no key (or $DSV41_API_KEY)
  int max_running = 8, max_queued = 64, step_tokens = 256, threads = 0;
  bool sequential = false;        // max_running 1: today's one-at-a-time server, for comparisons
  int decode_threads = 0;         // CPU: threads of a decode step (0: the hardware's, at most max_running)
  int request_timeout = 600;      // s, a request's whole life
  int idle_timeout = 30;          // s, reading a request and keeping an idle connection
  int write_timeout = 10;         // s, one write to a client
  int backlog = 1024;             // pending connections the kernel queues (capped by net.core.somaxconn)
  int keepalive_ms = 100;         // SSE keep-alive comment after this long without output
  double shutdown_timeout = 10;   // s, SIGTERM's drain
  int64_t max_body_bytes = 8 << 20;
  int64_t max_messages = 2048;
  int max_json_depth = 64;
  int max_images = 8;
  int64_t max_image_bytes = 16 << 20;     // one encoded image
  int64_t max_image_pixels = 25'000'000;  // one decoded image
  std::string image_dir;                  // local image files allowed under it (empty: data URLs only)
  int64_t max_queue_bytes = 4 << 20;  // unread output of one request before it is cancelled
};

ojson error_body(const std::string& msg, const std::string& type, const std::string& code = "") {
  ojson e = {{"message", msg}, {"type", type}, {"param", nullptr}, {"code", nullptr}};
  if (!code.empty()) e["code"] = code;
  return {{"error", e}};
}

void send_json(httplib::Response& res, int status, const ojson& body) {
  res.status = status;
  res.set_content(body.dump(), "application/json");
}

void send_error(httplib::Response& res, const BadRequest& e) {
  send_json(res, e.status, error_body(e.message, e.status >= 500 ? "server_error" : "invalid_request_error", e.code));
}

// A socket's local (peer false) or remote address, as cpp-httplib writes Request::local_addr/remote_addr
// (getnameinfo NI_NUMERICHOST) and its port. False for anything but a connected TCP socket.
bool socket_end(int fd, bool peer, std::string& ip, int& port) {
  sockaddr_storage a{};
  socklen_t n = sizeof a;
  auto* sa = reinterpret_cast<sockaddr*>(&a);
  if ((peer ? ::getpeername(fd, sa, &n) : ::getsockname(fd, sa, &n)) != 0) return false;
  if (a.ss_family == AF_INET) port = ntohs(reinterpret_cast<const sockaddr_in*>(&a)->sin_port);
  else if (a.ss_family == AF_INET6) port = ntohs(reinterpret_cast<const sockaddr_in6*>(&a)->sin6_port);
  else return false;
  char host[NI_MAXHOST];
  if (::getnameinfo(sa, n, host, sizeof host, nullptr, 0, NI_NUMERICHOST) != 0) return false;
  ip = host;
  return true;
}

// The accepted socket a request came on, so that a non-streamed request can notice a client that hung up.
// cpp-httplib 0.11 hands a handler no socket (nor Request::is_connection_closed, added later): it is the one
// descriptor of this process that is a connected TCP stream socket whose peer address and port and local
// address and port are the request's. A TCP connection's four are unique while it is open, and the handler's
// thread keeps this one open until the handler returns, so the descriptor stays the request's while it waits.
// -1 (the caller then waits as before) when /proc/self/fd cannot be read or not exactly one socket matches.
int request_socket(const httplib::Request& req) {
  if (req.remote_addr.empty() || req.local_addr.empty() || req.remote_port <= 0 || req.local_port <= 0) return -1;
  DIR* dir = ::opendir("/proc/self/fd");
  if (!dir) return -1;
  const int own = ::dirfd(dir);
  int found = -1, matches = 0;
  while (const dirent* e = ::readdir(dir)) {
    char* end = nullptr;
    const long fd = std::strtol(e->d_name, &end, 10);
    if (end == e->d_name || *end != '\0' || fd < 0 || fd == own) continue;
    int type = 0;
    socklen_t tl = sizeof type;
    std::string ip;
    int port = -1;
    if (::getsockopt(int(fd), SOL_SOCKET, SO_TYPE, &type, &tl) != 0 || type != SOCK_STREAM) continue;
    if (!socket_end(int(fd), true, ip, port) || port != req.remote_port || ip != req.remote_addr) continue;
    if (!socket_end(int(fd), false, ip, port) || port != req.local_port || ip != req.local_addr) continue;
    found = int(fd);
    ++matches;
  }
  ::closedir(dir);
  return matches == 1 ? found : -1;
}

// Whether the client of a request's socket has gone, judged as cpp-httplib 0.11 judges a socket before each write
// (SocketStream::write calls detail::is_socket_alive: a peek that returns 0 or fails, and then writes nothing):
// the client closed its side (FIN) or the connection was reset. Unread bytes (a pipelined request) or nothing yet:
// still there. A client that only half-closed (shutdown(SHUT_WR), still reading) counts as gone here as it does
// for cpp-httplib, which sends it no response.
bool client_gone(int fd) {
  char c;
  const ssize_t n = ::recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
  if (n >= 0) return n == 0;
  return errno == ECONNRESET || errno == ECONNABORTED || errno == ETIMEDOUT || errno == EPIPE || errno == ENOTCONN ||
         errno == EHOSTUNREACH || errno == ENETUNREACH;
}

// What each session id's last turn held (its prompt and generated tokens: their count and a hash), for the
// newest `capacity` ids (least recently used dropped). Resuming itself goes by the stored blocks' keys, as for a
// request without an id; this tells whether a prompt extends its session's last turn. Thread-safe (one mutex).
class SessionIds {
 public:
  struct Known {
    size_t tokens = 0;
    size_t hash = 0;
  };
  explicit SessionIds(size_t capacity) : cap_(capacity) {}

  static size_t hash_of(std::span<const int32_t> ids) {
    return std::hash<std::string_view>{}(
        std::string_view(reinterpret_cast<const char*>(ids.data()), ids.size() * sizeof(int32_t)));
  }
  // The id's last turn (making it the most recently used), if known.
  std::optional<Known> find(const std::string& id) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = map_.find(id);
    if (it == map_.end()) return std::nullopt;
    lru_.splice(lru_.begin(), lru_, it->second.second);
    return it->second.first;
  }
  void set(const std::string& id, Known k) {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = map_.find(id); it != map_.end()) {
      it->second.first = k;
      lru_.splice(lru_.begin(), lru_, it->second.second);
      return;
    }
    lru_.push_front(id);
    map_.emplace(id, std::make_pair(k, lru_.begin()));
    while (map_.size() > cap_) {
      map_.erase(lru_.back());
      lru_.pop_back();
    }
  }
  size_t size() {
    std::lock_guard<std::mutex> lock(mu_);
    return map_.size();
  }

 private:
  size_t cap_;
  std::mutex mu_;
  std::list<std::string> lru_;  // front: most recently used
  std::unordered_map<std::string, std::pair<Known, std::list<std::string>::iterator>> map_;
};

std::string sse(const ojson& j) { return "data: " + j.dump() + "\n\n"; }

// Splits streamed text into reasoning and content, holding back what may begin a marker.
class ChatSplitter {
 public:
  ChatSplitter(bool thinking, const text::ChatTokens& t)
      : in_reasoning_(thinking), think_close_(t.think_close), calls_("\n\n<" + t.dsml) {}
  // Appends text; returns the (reasoning, content) pieces that are final now.
  std::pair<std::string, std::string> push(std::string_view piece, bool final) {
    buf_ += piece;
    std::string r, c;
    if (in_reasoning_) {
      const size_t at = buf_.find(think_close_);
      if (at != std::string::npos) {
        r = buf_.substr(0, at);
        buf_.erase(0, at + think_close_.size());
        in_reasoning_ = false;
      } else {
        const size_t keep = final ? 0 : held(think_close_);
        r = buf_.substr(0, buf_.size() - keep);
        buf_.erase(0, buf_.size() - keep);
        return {r, c};
      }
    }
    if (in_calls_) return {r, c};
    const size_t at = buf_.find(calls_);
    if (at != std::string::npos) {
      c = buf_.substr(0, at);
      in_calls_ = true;
      buf_.clear();
      return {r, c};
    }
    const size_t keep = final ? 0 : held(calls_);
    c = buf_.substr(0, buf_.size() - keep);
    buf_.erase(0, buf_.size() - keep);
    return {r, c};
  }

 private:
  // Length of the longest suffix of buf_ that is a proper prefix of marker.
  size_t held(const std::string& marker) const {
    for (size_t n = std::min(marker.size() - 1, buf_.size()); n > 0; --n)
      if (buf_.compare(buf_.size() - n, n, marker, 0, n) == 0) return n;
    return 0;
  }
  bool in_reasoning_, in_calls_ = false;
  std::string think_close_, calls_, buf_;
};

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Set by SIGTERM/SIGINT (process-level, the CLI's only signal state); the server's watcher polls it.
volatile std::sig_atomic_t g_stop_signal = 0;
extern "C" void on_stop_signal(int sig) { g_stop_signal = sig; }

// A Prometheus histogram (cumulative buckets, sum, count).
struct Histogram {
  std::vector<double> bounds;
  std::vector<uint64_t> counts;
  double sum = 0;
  uint64_t n = 0;
  explicit Histogram(std::vector<double> b) : bounds(std::move(b)), counts(bounds.size(), 0) {}
  void observe(double v) {
    for (size_t i = 0; i < bounds.size(); ++i)
      if (v <= bounds[i]) ++counts[i];
    sum += v;
    ++n;
  }
  void write(std::string& out, const std::string& name, const std::string& help) const {
    out += "# HELP " + name + " " + help + "\n# TYPE " + name + " histogram\n";
    for (size_t i = 0; i < bounds.size(); ++i)
      out += fmt::format("{}_bucket{{le=\"{}\"}} {}\n", name, bounds[i], counts[i]);
    out += fmt::format("{}_bucket{{le=\"+Inf\"}} {}\n{}_sum {}\n{}_count {}\n", name, n, name, sum, name, n);
  }
};

struct Metrics {
  std::mutex mu;
  std::map<std::pair<std::string, int>, uint64_t> requests;  // (path, HTTP status)
  std::map<std::string, uint64_t> finishes;                  // engine requests by finish reason
  uint64_t prompt_tokens = 0, completion_tokens = 0, cached_tokens = 0, refused = 0;
  Histogram step{{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5}};
  Histogram ttft{{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}};
};

// One engine request's output, between the stepping thread (producer) and its HTTP handler (consumer). Bounded:
// more than max_bytes unread cancels the request (a reader that stalled), so the stepping thread never waits.
// One generated token's log-probabilities (engine's TokenLogprobs, copied out of the callback).
struct LpEntry {
  int32_t token = -1;
  float logprob = 0;
  std::vector<std::pair<int32_t, float>> top;
};

struct Job {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::string> pieces;
  std::vector<LpEntry> lp_pending, lp_all;  // logprobs requested: not yet streamed / all of them
  int32_t lp_skip = -1;                     // the EOS id: ends the text, not reported
  size_t bytes = 0, max_bytes = 0;
  bool done = false, overflow = false, first = true;
  bool client_gone = false;  // a non-streamed request's client hung up (set before done): cancelled for it
  text::TextDone result;
  RequestId id = 0;
  Clock::time_point submitted = Clock::now();
  Metrics* metrics = nullptr;
  std::mutex* live_mu = nullptr;     // the server's set of requests in the engine: erased from on_done
  std::set<RequestId>* live = nullptr;
};

struct Server {
  ServeOpts opt;
  std::atomic<bool> ready{false}, draining{false}, stopping{false};
  std::string load_error;
  std::unique_ptr<TextEngine> loaded;
  std::unique_ptr<text::TextEngineBase> batch;  // over *loaded
  std::atomic<uint64_t> counter{0};
  SessionIds session_ids{4096};
  GenerationDefaults gen;  // the model directory's generation_config.json
  Metrics metrics;
  httplib::Server http;
  httplib::Server health_http;  // --health-port: /health and /metrics only, its own workers
  // Wakes the stepping thread: submits bump `wakes`.
  std::mutex wake_mu;
  std::condition_variable wake_cv;
  uint64_t wakes = 0;
  // Requests in the engine (for the shutdown's cancel).
  std::mutex live_mu;
  std::set<RequestId> live;

  std::string next_id(const char* prefix) { return std::string(prefix) + std::to_string(++counter); }
  static int64_t now() { return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count(); }

  bool check_ready(httplib::Response& res) {
    if (draining) {
      send_json(res, 503, error_body("server is shutting down", "server_error", "shutting_down"));
      return false;
    }
    if (ready) return true;
    send_json(res, 503, error_body(load_error.empty() ? "model is loading" : "model failed to load: " + load_error,
                                   "server_error", "model_loading"));
    return false;
  }

  RequestLimits limits() const {
    RequestLimits l;
    l.max_tokens_cap = opt.max_tokens_cap;
    l.max_messages = opt.max_messages;
    l.max_json_depth = opt.max_json_depth;
    l.max_images = opt.max_images;
    return l;
  }

  // An image part's bytes: a base64 data URL, or a local file under --image-dir; nothing is fetched.
  std::vector<uint8_t> image_bytes(const std::string& url) const {
    const auto limit = size_t(opt.max_image_bytes);
    if (url.rfind("data:", 0) == 0) {
      const size_t comma = url.find(',');
      if (comma == std::string::npos || url.substr(0, comma).find(";base64") == std::string::npos)
        throw BadRequest{400, "image data URLs must be base64 (data:image/...;base64,...)", "invalid_image"};
      if ((url.size() - comma) / 4 * 3 > limit + 3)
        throw BadRequest{400, "image larger than " + std::to_string(limit) + " bytes", "image_too_large"};
      auto b = base64_decode(std::string_view(url).substr(comma + 1));
      if (!b) throw BadRequest{400, "image data URL is not valid base64", "invalid_image"};
      return std::move(*b);
    }
    if (url.rfind("http://", 0) == 0 || url.rfind("https://", 0) == 0)
      throw BadRequest{400, "image URLs are not fetched; send a base64 data URL", "invalid_image"};
    if (opt.image_dir.empty())
      throw BadRequest{400, "local image files are off (serve --image-dir DIR allows files under DIR)", "invalid_image"};
    namespace fs = std::filesystem;
    std::error_code ec;
    const std::string path = url.rfind("file://", 0) == 0 ? url.substr(7) : url;
    const fs::path root = fs::weakly_canonical(opt.image_dir, ec);
    const fs::path file = fs::weakly_canonical(fs::path(opt.image_dir) / path, ec);
    const auto rel = file.lexically_relative(root);
    if (ec || rel.empty() || *rel.begin() == ".." || !fs::is_regular_file(file, ec))
      throw BadRequest{400, "image file not found under --image-dir: " + path, "invalid_image"};
    const auto size = fs::file_size(file, ec);
    if (ec || size > limit) throw BadRequest{400, "image file larger than " + std::to_string(limit) + " bytes", "image_too_large"};
    std::vector<uint8_t> b(static_cast<size_t>(size));
    std::FILE* f = std::fopen(file.c_str(), "rb");
    if (!f) throw BadRequest{400, "image file unreadable: " + path, "invalid_image"};
    const size_t got = size ? std::fread(b.data(), 1, b.size(), f) : 0;
    std::fclose(f);
    if (got != b.size()) throw BadRequest{400, "image file unreadable: " + path, "invalid_image"};
    return b;
  }

  // The request's images, decoded and made into the ViT's patches (vision/image_processor.hpp).
  std::vector<vision::ProcessedImage> images_of(const ojson& messages) const {
    const std::vector<std::string> urls = image_urls(messages, limits());
    std::vector<vision::ProcessedImage> out;
    if (urls.empty()) return out;
    const ModelShape& sh = loaded->shape();
    if (!sh.has_vision || sh.vision.num_hidden_layers <= 0)
      throw BadRequest{400, "this model takes no images (no vision tower)", "unsupported_field"};
    vision::ImageLimits il;
    il.max_encoded_bytes = size_t(opt.max_image_bytes);
    il.max_pixels = opt.max_image_pixels;
    for (size_t k = 0; k < urls.size(); ++k) {
      const std::vector<uint8_t> bytes = image_bytes(urls[k]);
      auto img = vision::decode_image(bytes, il);
      if (!img.ok()) throw BadRequest{400, "image " + std::to_string(k) + ": " + img.status().message(), "invalid_image"};
      auto p = vision::process_image(*img, vision::ImageProcessorConfig::from(sh.vision));
      if (!p.ok()) throw BadRequest{400, "image " + std::to_string(k) + ": " + p.status().message(), "invalid_image"};
      out.push_back(std::move(p).value());
    }
    return out;
  }

  static BadRequest from_status(const Status& s) {
    if (s.code() == Code::out_of_range) return {400, s.message(), "context_length_exceeded"};
    if (s.code() == Code::resource_exhausted) return {429, s.message(), "server_busy"};
    if (s.code() == Code::internal || s.code() == Code::out_of_memory) return {500, s.message(), ""};
    return {400, s.message(), ""};
  }

  // thinking: the completion began inside <think>, so its reasoning tokens are the longest prefix of its ids whose
  // text holds no </think> (all of them when it never closed; the marker may take several tokens where the
  // tokenizer has no special token for it); chat completions reason in none.
  ojson usage(const text::TextResult& r, bool thinking = false) const {
    int64_t reasoning = 0;
    if (thinking) {
      const std::string& close = loaded->chat_tokens().think_close;
      const std::span<const int32_t> ids(r.ids);
      auto closed = [&](size_t k) { return loaded->tokenizer().decode(ids.first(k)).find(close) != std::string::npos; };
      size_t lo = 0, hi = ids.size();  // closed(lo) is false; find the largest such lo
      if (!closed(hi)) lo = hi;
      while (hi - lo > 1 && lo != ids.size()) {
        const size_t mid = lo + (hi - lo) / 2;
        (closed(mid) ? hi : lo) = mid;
      }
      reasoning = std::min<int64_t>(int64_t(lo), r.completion_tokens);
    }
    return {{"prompt_tokens", r.prompt_tokens}, {"completion_tokens", r.completion_tokens},
            {"total_tokens", r.prompt_tokens + r.completion_tokens},
            {"prompt_tokens_details", {{"cached_tokens", r.cached_tokens}}},
            {"completion_tokens_details", {{"reasoning_tokens", reasoning}}}};
  }

  // A token as OpenAI's logprobs show it: its text (lossy where it is part of a character) and its bytes.
  ojson token_json(int32_t id, float lp) const {
    const std::string b = loaded->tokenizer().token_bytes(id).value_or("");
    ojson bytes = ojson::array();
    for (unsigned char c : b) bytes.push_back(int(c));
    return {{"token", utf8::to_valid(b)}, {"logprob", lp_value(lp)}, {"bytes", bytes}};
  }
  static ojson lp_value(float lp) { return std::isfinite(lp) ? ojson(lp) : ojson(-9999.0); }  // OpenAI's floor
  ojson chat_logprobs(const std::vector<LpEntry>& es) const {
    ojson content = ojson::array();
    for (const LpEntry& e : es) {
      ojson c = token_json(e.token, e.logprob);
      ojson top = ojson::array();
      for (const auto& [t, v] : e.top) top.push_back(token_json(t, v));
      c["top_logprobs"] = top;
      content.push_back(c);
    }
    return {{"content", content}, {"refusal", nullptr}};
  }
  // The completions endpoint's legacy layout; offset: text bytes before the first entry.
  ojson legacy_logprobs(const std::vector<LpEntry>& es, size_t offset) const {
    ojson tokens = ojson::array(), lps = ojson::array(), tops = ojson::array(), offs = ojson::array();
    for (const LpEntry& e : es) {
      const std::string t = utf8::to_valid(loaded->tokenizer().token_bytes(e.token).value_or(""));
      tokens.push_back(t);
      lps.push_back(lp_value(e.logprob));
      ojson top = ojson::object();
      for (const auto& [id, v] : e.top) top[utf8::to_valid(loaded->tokenizer().token_bytes(id).value_or(""))] = lp_value(v);
      tops.push_back(top);
      offs.push_back(offset);
      offset += t.size();
    }
    return {{"tokens", tokens}, {"token_logprobs", lps}, {"top_logprobs", tops}, {"text_offset", offs}};
  }
  static std::vector<LpEntry> take_lps(Job& j) {
    std::lock_guard<std::mutex> lock(j.mu);
    return std::exchange(j.lp_pending, {});
  }

  text::TextRequest request_of(text::PromptText prompt, const text::TextOptions& o, bool session, int top_logprobs = -1) {
    if (top_logprobs >= 0 && o.speculative)
      throw BadRequest{400, "logprobs are not reported with speculative decoding", "unsupported_field"};
    text::TextRequest r;
    r.top_logprobs = top_logprobs;
    r.prompt = std::move(prompt.text);
    r.literal = std::move(prompt.literal);  // a chat prompt's content: special-token text stays text
    r.max_tokens = o.max_tokens;
    r.sampling = o.sampling;
    r.stop = o.stop;
    r.speculative = o.speculative;
    r.use_session = session;
    return r;
  }

  // Submits r; its output goes to the returned job.
  std::shared_ptr<Job> submit(text::TextRequest r) {
    auto job = std::make_shared<Job>();
    job->max_bytes = size_t(opt.max_queue_bytes);
    job->metrics = &metrics;
    job->live_mu = &live_mu;
    job->live = &live;
    auto* hold = new std::shared_ptr<Job>(job);  // the engine's reference, dropped in on_done
    r.ctx = hold;
    r.on_text = [](void* c, RequestId, int32_t id, std::string_view piece) {
      Job& j = **static_cast<std::shared_ptr<Job>*>(c);
      std::lock_guard<std::mutex> lock(j.mu);
      if (j.first && id >= 0) {
        j.first = false;
        std::lock_guard<std::mutex> ml(j.metrics->mu);
        j.metrics->ttft.observe(seconds_since(j.submitted));
      }
      if (piece.empty()) return true;
      j.pieces.emplace_back(piece);
      j.bytes += piece.size();
      j.cv.notify_all();
      if (j.bytes > j.max_bytes) {
        j.overflow = true;  // the reader stalled: cancel
        return false;
      }
      return true;
    };
    job->lp_skip = loaded->tokenizer().token_to_id(loaded->chat_tokens().eos).value_or(-1);
    if (r.top_logprobs >= 0)
      r.on_logprobs = [](void* c, RequestId, const TokenLogprobs& lp) {
        Job& j = **static_cast<std::shared_ptr<Job>*>(c);
        if (lp.token == j.lp_skip) return true;
        LpEntry e{lp.token, lp.logprob, {}};
        for (size_t i = 0; i < lp.top_ids.size(); ++i) e.top.emplace_back(lp.top_ids[i], lp.top_logprobs[i]);
        std::lock_guard<std::mutex> lock(j.mu);
        j.lp_pending.push_back(e);
        j.lp_all.push_back(std::move(e));
        return true;
      };
    r.on_done = [](void* c, const text::TextDone& d) {
      auto* h = static_cast<std::shared_ptr<Job>*>(c);
      std::shared_ptr<Job> j = std::move(*h);
      delete h;
      std::lock_guard<std::mutex> lock(j->mu);  // first: the finish label reads client_gone, set under it
      {
        std::lock_guard<std::mutex> ml(j->metrics->mu);
        const auto& r = d.result;
        const bool cancelled = r.finish == text::TextFinish::cancelled;
        j->metrics->finishes[j->overflow                     ? "cancelled_slow_reader"
                             : cancelled && j->client_gone ? "cancelled_client_gone"
                                                           : text::text_finish_name(r.finish)]++;
        j->metrics->prompt_tokens += uint64_t(r.prompt_tokens);
        j->metrics->completion_tokens += uint64_t(r.completion_tokens);
        j->metrics->cached_tokens += uint64_t(r.cached_tokens);
      }
      if (j->live) {
        std::lock_guard<std::mutex> ll(*j->live_mu);
        j->live->erase(d.id);
      }
      j->result = d;
      j->done = true;
      j->cv.notify_all();
    };
    if (!batch) throw BadRequest{503, "model is loading", "model_loading"};
    auto id = batch->submit(std::move(r));
    if (!id.ok()) {
      delete hold;
      if (id.status().code() == Code::resource_exhausted) {
        std::lock_guard<std::mutex> ml(metrics.mu);
        ++metrics.refused;
      }
      throw from_status(id.status());
    }
    job->id = *id;
    {
      std::lock_guard<std::mutex> lock(live_mu);
      live.insert(*id);
    }
    {  // on_done may have come before the insert: then it found nothing to erase
      std::lock_guard<std::mutex> lock(job->mu);
      if (job->done) {
        std::lock_guard<std::mutex> ll(live_mu);
        live.erase(*id);
      }
    }
    {
      std::lock_guard<std::mutex> lock(wake_mu);
      ++wakes;
    }
    wake_cv.notify_one();
    return job;
  }

  void cancel(Job& j) { static_cast<void>(batch->cancel(j.id)); }

  // Waits for the request's end (non-streaming), bounded by the request timeout. Every client_poll it looks
  // at the request's connection (request_socket): a client that hung up gets its request cancelled (finish
  // cancelled_client_gone, one line on stderr) and a 499 nobody reads. Without the socket: until done/timeout.
  static constexpr auto client_poll = std::chrono::milliseconds(200);
  std::atomic<bool> told_no_socket{false};  // the "connection not found" line is printed once
  void wait_done(Job& j, const httplib::Request& req) {
    const int fd = request_socket(req);
    if (fd < 0) {
      if (!told_no_socket.exchange(true))
        fmt::print(stderr, "dsv41 serve: the connection of a non-streamed request ({}:{}) was not found: such "
                           "requests run to their end if their client hangs up\n", req.remote_addr, req.remote_port);
    }
    std::unique_lock<std::mutex> lock(j.mu);
    const auto deadline = j.submitted + std::chrono::seconds(opt.request_timeout);
    auto end_cancelled = [&](auto&& why) {
      lock.unlock();
      cancel(j);
      lock.lock();
      j.cv.wait(lock, [&] { return j.done; });  // on_done comes within a step of the cancel
      why();
    };
    for (;;) {
      const auto until = fd < 0 ? deadline : std::min(deadline, Clock::now() + client_poll);
      if (j.cv.wait_until(lock, until, [&] { return j.done; })) return;
      if (Clock::now() >= deadline)
        end_cancelled([&] {
          throw BadRequest{504, "request timed out after " + std::to_string(opt.request_timeout) + " s",
                           "request_timeout"};
        });
      if (fd >= 0 && client_gone(fd)) {
        j.client_gone = true;
        end_cancelled([&] {
          if (j.result.result.finish != text::TextFinish::cancelled) return;  // it ended first: answer as usual
          fmt::print(stderr, "dsv41 serve: request {} cancelled: the client closed the connection ({}:{}; {} "
                             "prompt, {} generated tokens, {:.2f} s)\n", j.id, req.remote_addr, req.remote_port,
                     j.result.result.prompt_tokens, j.result.result.completion_tokens, seconds_since(j.submitted));
          throw BadRequest{499, "cancelled: the client closed the connection", "client_gone"};
        });
        return;
      }
    }
  }

  // A streaming request's loop: sends what the job produced through emit(piece) (false: the client is gone),
  // a keep-alive comment when nothing was sent for a while (how a client that hung up is noticed, also during
  // prefill), and cancels on a dead client or the request timeout. Returns false when the request was cancelled
  // or the client is gone.
  template <class Emit>
  bool pump(Job& j, httplib::DataSink& sink, Emit&& emit) {
    const auto deadline = j.submitted + std::chrono::seconds(opt.request_timeout);
    auto last_write = Clock::now();
    const auto keepalive = std::chrono::milliseconds(opt.keepalive_ms);
    for (;;) {
      std::deque<std::string> got;
      bool done;
      {
        std::unique_lock<std::mutex> lock(j.mu);
        j.cv.wait_for(lock, keepalive, [&] { return j.done || !j.pieces.empty(); });
        got.swap(j.pieces);
        j.bytes = 0;
        done = j.done;
      }
      for (auto& p : got)
        if (!emit(p)) {
          cancel(j);
          return false;
        }
      if (!got.empty()) last_write = Clock::now();
      if (done) return true;
      if (Clock::now() > deadline) {
        cancel(j);
        const std::string e = sse(error_body("request timed out after " + std::to_string(opt.request_timeout) + " s",
                                             "server_error", "request_timeout"));
        sink.write(e.data(), e.size());
        return false;
      }
      if (Clock::now() - last_write >= keepalive) {
        static const char ka[] = ": keep-alive\n\n";
        if (!sink.write(ka, sizeof ka - 1)) {
          cancel(j);
          return false;
        }
        last_write = Clock::now();
      }
    }
  }

  void chat(const httplib::Request& req, httplib::Response& res) {
    if (!check_ready(res)) return;
    const ChatPlan plan = plan_chat(parse_body(req.body, limits()), limits(), gen);
    std::vector<vision::ProcessedImage> images = images_of(plan.render["messages"]);
    const std::optional<std::string>& session = plan.session;
    auto prompt = loaded->render(plan.render);
    if (!prompt.ok()) throw from_status(prompt.status());
    const text::TextOptions& o = plan.options;
    const int top_lp = plan.top_logprobs;
    const bool stream = plan.stream;
    const bool thinking = plan.thinking;
    const std::string id = next_id("chatcmpl-"), model = opt.name;
    const int64_t created = now();
    auto finish_of = [this, thinking](const text::TextResult& r, text::ParsedMessage* msg) {
      const auto& toks = loaded->chat_tokens();
      auto pm = text::parse_completion(r.text + (r.finish == text::TextFinish::stop ? toks.eos : ""),
                                       thinking ? text::Mode::thinking : text::Mode::chat, toks);
      std::string fr = r.finish == text::TextFinish::stop ? "stop" : "length";
      if (pm.ok()) {
        *msg = std::move(pm).value();
        if (!msg->tool_calls.empty() && msg->finish == text::Finish::tool_calls) fr = "tool_calls";
      } else {
        msg->content = r.text;  // output outside the format: returned as plain content
      }
      for (size_t i = 0; i < msg->tool_calls.size(); ++i)
        if (msg->tool_calls[i].id.empty()) msg->tool_calls[i].id = "call_" + std::to_string(counter.load()) + "_" + std::to_string(i);
      return fr;
    };
    // With a session id: whether the prompt extends the session's last turn (logged), then that turn recorded.
    auto note_session = [this, session](const text::TextResult& r) {
      if (!session) return;
      std::vector<int32_t> ids = r.prompt_ids;
      const auto last = session_ids.find(*session);
      const bool extends = last && last->tokens <= ids.size() &&
                           SessionIds::hash_of(std::span<const int32_t>(ids).first(last->tokens)) == last->hash;
      ids.insert(ids.end(), r.ids.begin(), r.ids.end());
      session_ids.set(*session, {ids.size(), SessionIds::hash_of(ids)});
      fmt::print(stderr, "dsv41 serve: session {}: {}, {} of {} prompt tokens cached\n", *session,
                 !last ? "new" : extends ? "extends its last turn" : "does not extend its last turn", r.cached_tokens,
                 r.prompt_tokens);
    };
    text::TextRequest treq = request_of(*prompt, o, true, top_lp);
    treq.images = std::move(images);
    treq.forced_text = forced_call_text(plan, loaded->chat_tokens());
    if (!treq.forced_text.empty() && thinking) treq.force_after = loaded->chat_tokens().think_close;
    std::shared_ptr<Job> job = submit(std::move(treq));
    if (!stream) {
      wait_done(*job, req);
      const text::TextDone& d = job->result;
      if (d.result.finish == text::TextFinish::error) throw from_status(d.status);
      if (d.result.finish == text::TextFinish::cancelled)
        throw BadRequest{503, "request cancelled (server shutting down)", "cancelled"};
      note_session(d.result);
      const ojson lps = top_lp >= 0 ? chat_logprobs(job->lp_all) : ojson(nullptr);
      text::ParsedMessage msg;
      const std::string fr = finish_of(d.result, &msg);
      ojson m = text::to_openai_json(msg);
      if (m.contains("tool_calls") && m["tool_calls"].empty()) m.erase("tool_calls");
      if (!thinking) m.erase("reasoning_content");
      ojson body = {{"id", id}, {"object", "chat.completion"}, {"created", created}, {"model", model},
                    {"choices", ojson::array({{{"index", 0}, {"message", m}, {"logprobs", lps}, {"finish_reason", fr}}})},
                    {"usage", usage(d.result, thinking)}};
      if (session) body["session_id"] = *session;
      send_json(res, 200, body);
      return;
    }
    const bool include_usage = plan.include_usage;
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider(
        "text/event-stream",
        [this, job, thinking, id, model, created, include_usage, finish_of, session,
         note_session, top_lp](size_t, httplib::DataSink& sink) {
          // A chunk carries the logprobs of the tokens that arrived since the last chunk that carried some.
          std::vector<LpEntry> lps;
          auto chunk = [&](const ojson& delta, const ojson& finish) {
            ojson c{{"id", id}, {"object", "chat.completion.chunk"}, {"created", created}, {"model", model},
                    {"choices", ojson::array({{{"index", 0}, {"delta", delta}, {"finish_reason", finish}}})}};
            if (top_lp >= 0) {
              auto more = take_lps(*job);
              lps.insert(lps.end(), more.begin(), more.end());
              const bool carries = !lps.empty() && (finish.is_string() || delta.contains("content") ||
                                                    delta.contains("reasoning_content") || delta.contains("tool_calls"));
              c["choices"][0]["logprobs"] = carries ? chat_logprobs(std::exchange(lps, {})) : ojson(nullptr);
            }
            if (session) c["session_id"] = *session;
            return c;
          };
          auto write = [&](const std::string& s) { return sink.write(s.data(), s.size()); };
          auto emit = [&](const ojson& delta, const ojson& finish) { return write(sse(chunk(delta, finish))); };
          ChatSplitter split(thinking, loaded->chat_tokens());
          if (!emit({{"role", "assistant"}, {"content", ""}}, nullptr)) {
            cancel(*job);
            return false;
          }
          // Tool calls as they form (text/tool_call_stream.hpp): header, then arguments as deltas.
          text::ToolCallStream calls(thinking ? text::Mode::thinking : text::Mode::chat, loaded->chat_tokens());
          std::string all;  // the completion's text so far
          auto stream_calls = [&](const std::vector<text::ToolCallDelta>& ds) {
            for (const auto& d : ds) {
              ojson call = {{"index", d.index}, {"function", {{"arguments", d.arguments}}}};
              if (d.header) {
                call["id"] = "call_" + id + "_" + std::to_string(d.index);
                call["type"] = "function";
                call["function"]["name"] = d.name;
              }
              if (!emit({{"tool_calls", ojson::array({call})}}, nullptr)) return false;
            }
            return true;
          };
          const bool ok = pump(*job, sink, [&](const std::string& piece) {
            all += piece;
            auto [r, t] = split.push(piece, false);
            if (!r.empty() && !emit({{"reasoning_content", r}}, nullptr)) return false;
            if (!t.empty() && !emit({{"content", t}}, nullptr)) return false;
            return stream_calls(calls.update(all));
          });
          if (!ok) return false;
          const text::TextDone& d = job->result;
          if (d.result.finish == text::TextFinish::error) {
            write(sse(error_body(d.status.message(), "invalid_request_error")));
            sink.done();
            return true;
          }
          if (d.result.finish == text::TextFinish::cancelled) {  // shutdown or a slow reader
            write(sse(error_body(job->overflow ? "cancelled: the client did not read its stream"
                                               : "cancelled: server shutting down", "server_error", "cancelled")));
            sink.done();
            return true;
          }
          note_session(d.result);
          auto [rr, tt] = split.push("", true);
          if (!rr.empty()) emit({{"reasoning_content", rr}}, nullptr);
          if (!tt.empty()) emit({{"content", tt}}, nullptr);
          text::ParsedMessage msg;
          const std::string fr = finish_of(d.result, &msg);
          if (!msg.tool_calls.empty()) stream_calls(calls.finish(msg.tool_calls));
          emit(ojson::object(), fr);
          if (include_usage) {
            ojson u = {{"id", id}, {"object", "chat.completion.chunk"}, {"created", created}, {"model", model},
                       {"choices", ojson::array()}, {"usage", usage(d.result, thinking)}};
            if (session) u["session_id"] = *session;
            write(sse(u));
          }
          write("data: [DONE]\n\n");
          sink.done();
          return true;
        });
  }

  void completions(const httplib::Request& req, httplib::Response& res) {
    if (!check_ready(res)) return;
    CompletionPlan plan = plan_completion(parse_body(req.body, limits()), limits(), gen);
    std::string prompt = std::move(plan.prompt);
    const auto& toks = loaded->chat_tokens();
    if (prompt.rfind(toks.bos, 0) != 0) prompt = toks.bos + prompt;
    const text::TextOptions& o = plan.options;
    const int top_lp = plan.top_logprobs;
    const std::string id = next_id("cmpl-"), model = opt.name;
    const int64_t created = now();
    auto body_of = [id, model, created](const std::string& text, const ojson& finish, ojson lps = nullptr) {
      return ojson{{"id", id}, {"object", "text_completion"}, {"created", created}, {"model", model},
                   {"choices", ojson::array({{{"index", 0}, {"text", text}, {"logprobs", lps}, {"finish_reason", finish}}})}};
    };
    const bool stream = plan.stream;
    std::shared_ptr<Job> job = submit(request_of(text::PromptText{std::move(prompt), {}}, o, true, top_lp));
    if (!stream) {
      wait_done(*job, req);
      const text::TextDone& d = job->result;
      if (d.result.finish == text::TextFinish::error) throw from_status(d.status);
      if (d.result.finish == text::TextFinish::cancelled)
        throw BadRequest{503, "request cancelled (server shutting down)", "cancelled"};
      ojson b = body_of(d.result.text, text::text_finish_name(d.result.finish),
                        top_lp >= 0 ? legacy_logprobs(job->lp_all, 0) : ojson(nullptr));
      b["usage"] = usage(d.result);
      send_json(res, 200, b);
      return;
    }
    res.set_chunked_content_provider("text/event-stream", [this, job, body_of, top_lp](size_t, httplib::DataSink& sink) {
      size_t offset = 0;  // text bytes of the entries sent so far
      auto lps_now = [&]() -> ojson {
        if (top_lp < 0) return nullptr;
        const std::vector<LpEntry> es = take_lps(*job);
        ojson l = legacy_logprobs(es, offset);
        for (const auto& t : l["tokens"]) offset += t.get<std::string>().size();
        return l;
      };
      const bool ok = pump(*job, sink, [&](const std::string& piece) {
        const std::string s = sse(body_of(piece, nullptr, lps_now()));
        return sink.write(s.data(), s.size());
      });
      if (!ok) return false;
      const text::TextDone& d = job->result;
      if (d.result.finish == text::TextFinish::error || d.result.finish == text::TextFinish::cancelled) {
        const std::string s = sse(error_body(d.result.finish == text::TextFinish::error ? d.status.message() : "cancelled",
                                             "server_error"));
        sink.write(s.data(), s.size());
        sink.done();
        return true;
      }
      const std::string last = sse(body_of("", text::text_finish_name(d.result.finish), lps_now())) + "data: [DONE]\n\n";
      sink.write(last.data(), last.size());
      sink.done();
      return true;
    });
  }

  std::string metrics_text() {
    EngineCounts c;
    if (batch) c = batch->counts();
    std::string out;
    std::lock_guard<std::mutex> lock(metrics.mu);
    out += "# HELP dsv41_requests_total HTTP requests answered, by path and status code.\n"
           "# TYPE dsv41_requests_total counter\n";
    for (const auto& [k, n] : metrics.requests)
      out += fmt::format("dsv41_requests_total{{path=\"{}\",code=\"{}\"}} {}\n", k.first, k.second, n);
    out += "# HELP dsv41_engine_requests_total Generation requests ended, by finish reason.\n"
           "# TYPE dsv41_engine_requests_total counter\n";
    for (const char* f : {"stop", "length", "cancelled", "cancelled_slow_reader", "cancelled_client_gone", "error"})
      out += fmt::format("dsv41_engine_requests_total{{finish=\"{}\"}} {}\n", f,
                         metrics.finishes.count(f) ? metrics.finishes.at(f) : 0);
    auto counter = [&](const char* name, const char* help, uint64_t v) {
      out += fmt::format("# HELP {} {}\n# TYPE {} counter\n{} {}\n", name, help, name, name, v);
    };
    auto gauge = [&](const char* name, const char* help, double v) {
      out += fmt::format("# HELP {} {}\n# TYPE {} gauge\n{} {}\n", name, help, name, name, v);
    };
    counter("dsv41_refused_total", "Requests refused because the queue was full (429).", metrics.refused);
    counter("dsv41_prompt_tokens_total", "Prompt tokens of ended requests.", metrics.prompt_tokens);
    counter("dsv41_completion_tokens_total", "Generated tokens of ended requests.", metrics.completion_tokens);
    counter("dsv41_cached_tokens_total", "Prompt tokens resumed from the session store.", metrics.cached_tokens);
    counter("dsv41_engine_steps_total", "Engine steps run.", c.steps);
    gauge("dsv41_queue_depth", "Requests waiting for admission.", c.queued);
    gauge("dsv41_running_requests", "Admitted requests (prefilling or decoding).", c.prefilling + c.decoding);
    gauge("dsv41_prefilling_requests", "Admitted requests still in prefill.", c.prefilling);
    gauge("dsv41_cache_bytes", "Estimated cache bytes reserved by admitted requests.", double(c.cache_bytes));
    gauge("dsv41_draining", "1 while shutting down.", draining ? 1 : 0);
    metrics.step.write(out, "dsv41_step_seconds", "Wall time of one engine step.");
    metrics.ttft.write(out, "dsv41_time_to_first_token_seconds", "From submission to the first generated token.");
    return out;
  }

  // The stepping thread: steps while there is work, sleeps until a submit otherwise.
  void stepper() {
    uint64_t seen = 0;
    while (!stopping) {
      if (batch->idle()) {
        std::unique_lock<std::mutex> lock(wake_mu);
        wake_cv.wait_for(lock, std::chrono::milliseconds(200), [&] { return wakes != seen || stopping; });
        seen = wakes;
        continue;
      }
      const auto t0 = Clock::now();
      batch->step();
      const double dt = seconds_since(t0);
      std::lock_guard<std::mutex> lock(metrics.mu);
      metrics.step.observe(dt);
    }
  }

  // SIGTERM/SIGINT: stop admitting, let running requests finish until the deadline, cancel the rest, stop.
  void watch_signals() {
    while (!g_stop_signal && !stopping) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    if (stopping) return;
    draining = true;
    const auto t0 = Clock::now();
    EngineCounts c;
    if (batch) c = batch->counts();
    fmt::print(stderr, "dsv41 serve: {}: draining ({} running, {} queued; deadline {} s)\n",
               g_stop_signal == SIGINT ? "SIGINT" : "SIGTERM", c.prefilling + c.decoding, c.queued, opt.shutdown_timeout);
    const auto deadline = t0 + std::chrono::duration<double>(opt.shutdown_timeout);
    while (batch && !batch->idle() && Clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    size_t cancelled = 0;
    if (batch && !batch->idle()) {
      std::vector<RequestId> ids;
      {
        std::lock_guard<std::mutex> lock(live_mu);
        ids.assign(live.begin(), live.end());
      }
      for (RequestId id : ids)
        if (batch->cancel(id).ok()) ++cancelled;
      const auto hard = Clock::now() + std::chrono::seconds(5);
      while (!batch->idle() && Clock::now() < hard) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));  // handlers send their last chunks
    fmt::print(stderr, "dsv41 serve: drained in {:.2f} s ({}), stopping\n", seconds_since(t0),
               cancelled ? fmt::format("cancelled the requests still running") : std::string("all requests finished"));
    http.stop();
  }

  // /health and /metrics, the same on the main port and on --health-port.
  void health_page(const httplib::Request&, httplib::Response& res) {
    if (draining) send_json(res, 503, {{"status", "draining"}});
    else if (ready) send_json(res, 200, {{"status", "ok"}});
    else send_json(res, 503, {{"status", load_error.empty() ? "loading" : "failed"}, {"error", load_error}});
  }
  void metrics_page(const httplib::Request&, httplib::Response& res) {
    res.set_content(metrics_text(), "text/plain; version=0.0.4");
  }
  // Both listeners' logger: every answered request counts once in dsv41_requests_total{path,code}, under its
  // path whichever port answered it (paths that are no route of the main port: "other").
  void count_request(const httplib::Request& req, const httplib::Response& res) {
    std::string path = req.path;
    if (path != "/v1/chat/completions" && path != "/v1/completions" && path != "/v1/models" && path != "/health" &&
        path != "/metrics")
      path = "other";
    std::lock_guard<std::mutex> lock(metrics.mu);
    ++metrics.requests[{path, res.status}];
  }
  // Both listeners' error handler: a JSON body for a 4xx/5xx that has none yet.
  void error_page(const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    const std::string msg = res.status == 404   ? "no route " + req.method + " " + req.path
                            : res.status == 413 ? "request body larger than " + std::to_string(opt.max_body_bytes) + " bytes"
                                                : "request failed";
    send_json(res, res.status, error_body(msg, "invalid_request_error", res.status == 413 ? "body_too_large" : ""));
  }

  // --health-port: a listener of its own for liveness/readiness probes and scrapes, so that clients holding every
  // worker of the main port (slow, idle, or just many) cannot make /health slow. Two workers, short timeouts and
  // no keep-alive: a connection holds a worker for one request, at most ~1 s waiting for it and 2 s per read or
  // write. Only GET/HEAD /health and /metrics, answered by the main port's code; anything else is refused before
  // a body is read (404, or 405 for another method on those two paths).
  void configure_health_server() {
    health_http.new_task_queue = [] { return new httplib::ThreadPool(2); };
    health_http.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
      const bool ours = req.path == "/health" || req.path == "/metrics";
      if (ours && (req.method == "GET" || req.method == "HEAD")) return httplib::Server::HandlerResponse::Unhandled;
      if (ours) {
        res.set_header("Allow", "GET, HEAD");
        send_json(res, 405, error_body("only GET " + req.path + " on the health port", "invalid_request_error"));
      } else {
        send_json(res, 404, error_body("no route " + req.method + " " + req.path +
                                           " (the health port serves /health and /metrics only)",
                                       "invalid_request_error"));
      }
      return httplib::Server::HandlerResponse::Handled;
    });
    health_http.set_logger([this](const httplib::Request& req, const httplib::Response& res) { count_request(req, res); });
    health_http.Get("/health", [this](const httplib::Request& req, httplib::Response& res) { health_page(req, res); });
    health_http.Get("/metrics", [this](const httplib::Request& req, httplib::Response& res) { metrics_page(req, res); });
    health_http.set_error_handler([this](const httplib::Request& req, httplib::Response& res) { error_page(req, res); });
    health_http.set_payload_max_length(4096);
    health_http.set_read_timeout(2, 0);
    health_http.set_write_timeout(2, 0);
    health_http.set_keep_alive_timeout(1);    // how long a new connection may take to send its request
    health_http.set_keep_alive_max_count(1);  // one request a connection: no idle keep-alive holds a worker
  }

  bool authorized(const httplib::Request& req) const {
    if (opt.api_key.empty()) return true;
    const std::string want = "Bearer " + opt.api_key, got = req.get_header_value("Authorization");
    unsigned diff = got.size() != want.size();
    for (size_t i = 0; i < want.size(); ++i) diff |= unsigned(uint8_t(want[i]) ^ uint8_t(i < got.size() ? got[i] : 0));
    return diff == 0;
  }

  int run() {
    auto guarded = [this](auto handler) {
      return [this, handler](const httplib::Request& req, httplib::Response& res) {
        try {
          (this->*handler)(req, res);
        } catch (const BadRequest& e) {
          send_error(res, e);
        } catch (const std::exception& e) {
          send_error(res, {500, std::string("internal error: ") + e.what(), ""});
        }
      };
    };
    http.new_task_queue = [this] { return new httplib::ThreadPool(size_t(opt.threads)); };
    http.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
      // Runs before the body is read. The body limit holds for Content-Length only: chunked bodies (411) and
      // compressed ones (415; 400 KB of gzip can inflate to gigabytes) are refused unread.
      if (req.has_header("Transfer-Encoding") && req.get_header_value("Transfer-Encoding") != "identity") {
        send_json(res, 411, error_body("request bodies must come with Content-Length (no chunked transfer)",
                                       "invalid_request_error", "length_required"));
        return httplib::Server::HandlerResponse::Handled;
      }
      if (req.has_header("Content-Encoding") && req.get_header_value("Content-Encoding") != "identity") {
        send_json(res, 415, error_body("compressed request bodies are not accepted (Content-Encoding: " +
                                           req.get_header_value("Content-Encoding") + ")",
                                       "invalid_request_error", "unsupported_encoding"));
        return httplib::Server::HandlerResponse::Handled;
      }
      if (req.path.rfind("/v1/", 0) != 0 || authorized(req)) return httplib::Server::HandlerResponse::Unhandled;
      res.set_header("WWW-Authenticate", "Bearer");
      send_json(res, 401, error_body("invalid or missing API key (Authorization: Bearer KEY)", "invalid_request_error",
                                     "invalid_api_key"));
      return httplib::Server::HandlerResponse::Handled;
    });
    http.set_logger([this](const httplib::Request& req, const httplib::Response& res) { count_request(req, res); });
    http.Get("/health", [this](const httplib::Request& req, httplib::Response& res) { health_page(req, res); });
    http.Get("/metrics", [this](const httplib::Request& req, httplib::Response& res) { metrics_page(req, res); });
    http.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
      send_json(res, 200, {{"object", "list"},
                           {"data", ojson::array({{{"id", opt.name}, {"object", "model"}, {"created", 0}, {"owned_by", "dsv41"}}})}});
    });
    http.Post("/v1/chat/completions", guarded(&Server::chat));
    http.Post("/v1/completions", guarded(&Server::completions));
    http.set_error_handler([this](const httplib::Request& req, httplib::Response& res) { error_page(req, res); });
    http.set_payload_max_length(size_t(opt.max_body_bytes));
    http.set_read_timeout(opt.idle_timeout, 0);
    http.set_keep_alive_timeout(std::min(opt.idle_timeout, 5));  // also how long stop() waits for idle connections
    http.set_write_timeout(opt.write_timeout, 0);
    std::signal(SIGPIPE, SIG_IGN);
    std::signal(SIGTERM, on_stop_signal);
    std::signal(SIGINT, on_stop_signal);
    std::thread step_thread;
    std::thread loader([this, &step_thread] {
      if (opt.load_delay_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(opt.load_delay_ms));
      auto l = load_text_model(opt.load);
      if (!l.ok()) {
        load_error = l.status().to_string();
        fmt::print(stderr, "dsv41 serve: {}\n", load_error);
        return;
      }
      loaded = std::move(l).value();
      auto dir = start_sessions(*loaded, opt.load, opt.sessions, "dsv41 serve");
      if (!dir.ok()) {
        load_error = dir.status().to_string();
        fmt::print(stderr, "dsv41 serve: {}\n", load_error);
        return;
      }
      if (!dir->empty())
        fmt::print(stderr, "dsv41 serve: sessions stored in {} (blocks of {} tokens)\n", *dir, opt.sessions.block);
      EngineOptions eo;
      eo.max_running = opt.sequential ? 1 : opt.max_running;
      eo.max_queued = opt.max_queued;
      eo.step_tokens = opt.step_tokens;
      eo.threads = opt.decode_threads > 0
                       ? opt.decode_threads
                       : std::clamp(int(std::thread::hardware_concurrency()), 1, eo.max_running);
      auto b = loaded->make_batch(eo);
      if (!b.ok()) {
        load_error = b.status().to_string();
        fmt::print(stderr, "dsv41 serve: {}\n", load_error);
        return;
      }
      batch = std::move(b).value();
      step_thread = std::thread([this] { stepper(); });
      ready = true;
      fmt::print(stderr, "dsv41 serve: model ready ({} running at most, {} queued, {} tokens a step, {} decode threads)\n",
                 eo.max_running, eo.max_queued, eo.step_tokens, opt.load.device == "cpu" ? eo.threads : 1);
    });
    std::thread watcher([this] { watch_signals(); });
    // cpp-httplib 0.11 listens with a backlog of 5, compiled into its library: a burst of connections beyond it
    // can be reset. The listening socket is recorded as it is made and listen() is called on it again with
    // --backlog (Linux updates the backlog of a listening socket).
    int listen_fd = -1;
    http.set_socket_options([&listen_fd](socket_t sock) {
      httplib::default_socket_options(sock);
      listen_fd = int(sock);
    });
    bool ok = http.bind_to_port(opt.host, opt.port);
    std::string failed = ok ? "" : fmt::format("{}:{}", opt.host, opt.port);  // what could not be bound
    if (ok && listen_fd >= 0 && ::listen(listen_fd, opt.backlog) != 0)
      fmt::print(stderr, "dsv41 serve: the listen backlog stays at 5 ({})\n", std::strerror(errno));
    // The health listener, once the main socket is bound; it stops after the main one (SIGTERM's drain
    // included: probes see 503 "draining" until the main port has finished).
    std::thread health_thread;
    std::atomic<bool> health_ended{false};
    if (ok && opt.health_port > 0) {
      configure_health_server();
      errno = 0;
      if (!health_http.bind_to_port(opt.host, opt.health_port)) {
        ok = false;
        failed = fmt::format("{}:{} (--health-port{})", opt.host, opt.health_port,
                             errno ? std::string(": ") + std::strerror(errno) : std::string());
      } else {
        health_thread = std::thread([this, &health_ended] {
          if (!health_http.listen_after_bind() && !stopping)
            fmt::print(stderr, "dsv41 serve: the health port {} stopped accepting connections\n", opt.health_port);
          health_ended = true;
        });
        // httplib's stop() acts on a running server only: wait until it runs, so that the stop below is not lost.
        while (!health_http.is_running() && !health_ended) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    }
    if (ok) {
      fmt::print(stderr, "dsv41 serve: listening on http://{}:{} (backlog {})\n", opt.host, opt.port, opt.backlog);
      if (health_thread.joinable())
        fmt::print(stderr, "dsv41 serve: health port listening on http://{}:{} (/health and /metrics only, 2 workers)\n",
                   opt.host, opt.health_port);
      ok = http.listen_after_bind();
      if (!ok) failed = fmt::format("{}:{}", opt.host, opt.port);
    }
    stopping = true;
    if (health_thread.joinable()) {
      health_http.stop();
      health_thread.join();
    }
    loader.join();
    watcher.join();
    wake_cv.notify_all();
    if (step_thread.joinable()) step_thread.join();
    if (!ok) {
      fmt::print(stderr, "dsv41 serve: cannot listen on {}\n", failed);
      return 1;
    }
    fmt::print(stderr, "dsv41 serve: stopped\n");
    return 0;
  }
};

int run_serve(void* p) {
  auto& o = *static_cast<ServeOpts*>(p);
  if (o.name.empty()) o.name = std::filesystem::path(o.load.model_dir).filename().string();
  if (o.api_key.empty())
    if (const char* k = std::getenv("DSV41_API_KEY")) o.api_key = k;
  if (o.threads < 1) o.threads = o.max_running + o.max_queued + 8;
  // Handler threads each get a glibc malloc arena by default: RSS crept +47% over a 10-minute soak; two arenas
  // keep it flat (bench/README "Server soak"). The CLI's process setting, not the library's.
  mallopt(M_ARENA_MAX, 2);
  auto gen = load_generation_defaults(o.load.model_dir);
  if (!gen.ok()) {
    fmt::print(stderr, "dsv41 serve: {}\n", gen.status().to_string());
    return 1;
  }
  // Lives until exit (handlers may still hold it while the process stops), kept in a static so that it stays
  // reachable: a leak checker then sees an owner (the CLI's process, not the library). Volatile: a static that is
  // only written is otherwise optimized away (LeakSanitizer then reported the model as leaked).
  static Server* volatile kept = nullptr;
  auto* s = new Server;
  kept = s;
  s->opt = o;
  s->gen = *gen;
  return s->run();
}

}  // namespace

Command add_serve(CLI::App& app) {
  auto o = std::make_shared<ServeOpts>();
  auto* sub = app.add_subcommand("serve", "OpenAI-compatible HTTP server");
  sub->add_option("-m,--model", o->load.model_dir, "model directory (default $DSV41_MODEL)")->required()->envname("DSV41_MODEL");
  sub->add_option("--tokenizer", o->load.tokenizer, "tokenizer.json (default MODEL/tokenizer.json)");
  sub->add_option("--device", o->load.device, "cpu (reference) or cuda")->check(CLI::IsMember({"cpu", "cuda"}));
  sub->add_option("--host", o->host, "address to listen on");
  sub->add_option("--port", o->port, "port")->check(CLI::Range(1, 65535));
  sub->add_option("--health-port", o->health_port,
                  "also serve /health and /metrics on this port, with 2 workers of its own, for probes (0: off)")
      ->check(CLI::Range(0, 65535));
  sub->add_option("--model-name", o->name, "name reported by /v1/models (default: the directory name)");
  sub->add_option("--max-tokens-cap", o->max_tokens_cap, "largest max_tokens a request may ask for");
  sub->add_option("--debug-load-delay-ms", o->load_delay_ms, "wait before loading (tests the 503 answer)");
  sub->add_option("--api-key", o->api_key, "require Authorization: Bearer KEY on /v1/* (default $DSV41_API_KEY)");
  sub->add_option("--max-running", o->max_running, "requests sharing the engine's steps")->check(CLI::Range(1, 4096));
  sub->add_option("--max-queued", o->max_queued, "requests waiting beyond those (then 429)")->check(CLI::Range(0, 100000));
  sub->add_option("--step-tokens", o->step_tokens, "tokens one engine step runs (decodes + prefill chunks)");
  sub->add_flag("--sequential", o->sequential, "one request at a time (max-running 1), for comparisons");
  sub->add_option("--decode-threads", o->decode_threads,
                  "cpu: threads a decode step spreads its sequences over (default: the hardware's, at most max-running)")
      ->check(CLI::Range(0, 1024));
  sub->add_option("--threads", o->threads, "HTTP worker threads (default max-running + max-queued + 8)");
  sub->add_option("--request-timeout", o->request_timeout, "seconds a request may take")->check(CLI::Range(1, 86400));
  sub->add_option("--idle-timeout", o->idle_timeout, "seconds to read a request / keep an idle connection")->check(CLI::Range(1, 3600));
  sub->add_option("--backlog", o->backlog, "connections the kernel queues before they are accepted")->check(CLI::Range(8, 65535));
  sub->add_option("--write-timeout", o->write_timeout, "seconds one write to a client may block")->check(CLI::Range(1, 3600));
  sub->add_option("--keepalive-ms", o->keepalive_ms, "SSE keep-alive comment after this long without output")->check(CLI::Range(10, 60000));
  sub->add_option("--shutdown-timeout", o->shutdown_timeout, "seconds SIGTERM lets running requests finish");
  sub->add_option("--max-body-bytes", o->max_body_bytes, "largest request body (413 beyond)");
  sub->add_option("--max-messages", o->max_messages, "most messages in a chat request (400 beyond)");
  sub->add_option("--max-json-depth", o->max_json_depth, "deepest nesting of a request body's JSON (400 beyond)")->check(CLI::Range(2, 1000));
  sub->add_option("--max-images", o->max_images, "most images in a chat request (400 beyond)");
  sub->add_option("--max-image-bytes", o->max_image_bytes, "largest encoded image (400 beyond)");
  sub->add_option("--max-image-pixels", o->max_image_pixels, "largest decoded image, width x height (400 beyond)");
  sub->add_option("--image-dir", o->image_dir, "allow image parts naming local files under this directory");
  sub->add_option("--max-queue-bytes", o->max_queue_bytes, "unread output of a request before it is cancelled");
  add_session_options(sub, o->sessions);
  return {sub, run_serve, o};
}

}  // namespace dsv41::cli
