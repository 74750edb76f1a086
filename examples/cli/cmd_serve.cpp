// dsv41 serve: an OpenAI-compatible HTTP server (cpp-httplib). /v1/chat/completions (SSE streaming or
// not, reasoning_content, tool calls), /v1/completions, /v1/models, /health (503 while loading).
// One model, requests served one at a time; bad requests get 4xx JSON errors and never stop the server.
// Sessions (on by default, CPU): prompts resume from stored blocks; a chat request may name its session with the
// extension field "session_id" (echoed in the response).
#include <atomic>
#include <chrono>
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

#include "commands.hpp"
#include "text_loader.hpp"

namespace dsv41::cli {
namespace {

using ojson = nlohmann::ordered_json;

struct ServeOpts {
  LoadArgs load;
  std::string host = "127.0.0.1", name;
  int port = 8080;
  int max_tokens_cap = 4096;
  int load_delay_ms = 0;  // tests: keep /health at 503 this long
  SessionArgs sessions;
};

struct BadRequest {
  int status;
  std::string message, code;
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

// Reads the sampling fields shared by both endpoints.
text::TextOptions sampling_of(const ojson& j, int default_max, int cap) {
  text::TextOptions o;
  auto num = [&](const char* k, double lo, double hi, double def) {
    if (!j.contains(k) || j[k].is_null()) return def;
    if (!j[k].is_number()) throw BadRequest{400, std::string(k) + " must be a number", ""};
    const double v = j[k].get<double>();
    if (!(v >= lo && v <= hi)) throw BadRequest{400, std::string(k) + " out of range", ""};
    return v;
  };
  const char* mt = j.contains("max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
  o.max_tokens = int(num(mt, 0, cap, default_max));
  o.sampling.temperature = float(num("temperature", 0, 2, 1.0));
  o.sampling.top_p = float(num("top_p", 0, 1, 1.0));
  o.sampling.top_k = int(num("top_k", 0, 1e9, 0));
  o.sampling.min_p = float(num("min_p", 0, 1, 0));
  if (j.contains("seed") && !j["seed"].is_null()) {
    if (!j["seed"].is_number_integer()) throw BadRequest{400, "seed must be an integer", ""};
    o.sampling.seed = j["seed"].get<uint64_t>();
  } else {
    o.sampling.seed = uint64_t(std::chrono::steady_clock::now().time_since_epoch().count());
  }
  if (j.contains("n") && !(j["n"].is_number_integer() && j["n"].get<int>() == 1))
    throw BadRequest{400, "only n = 1 is supported", ""};
  if (j.contains("stop") && !j["stop"].is_null()) {
    const auto& s = j["stop"];
    if (s.is_string()) o.stop.push_back(s.get<std::string>());
    else if (s.is_array()) {
      for (const auto& x : s) {
        if (!x.is_string() || x.get<std::string>().empty()) throw BadRequest{400, "stop must hold non-empty strings", ""};
        o.stop.push_back(x.get<std::string>());
      }
    } else throw BadRequest{400, "stop must be a string or an array of strings", ""};
  }
  o.speculative = j.value("speculative", false);
  return o;
}

// The chat request's extension field "session_id": absent or null, or 1-256 bytes without control characters.
std::optional<std::string> session_id_of(const ojson& j) {
  if (!j.contains("session_id") || j["session_id"].is_null()) return std::nullopt;
  if (!j["session_id"].is_string()) throw BadRequest{400, "session_id must be a string", "invalid_session_id"};
  std::string id = j["session_id"].get<std::string>();
  if (id.empty() || id.size() > 256) throw BadRequest{400, "session_id must be 1 to 256 bytes", "invalid_session_id"};
  for (unsigned char c : id)
    if (c < 0x20 || c == 0x7f) throw BadRequest{400, "session_id must not hold control characters", "invalid_session_id"};
  return id;
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

bool want_stream(const ojson& j) {
  if (!j.contains("stream") || j["stream"].is_null()) return false;
  if (!j["stream"].is_boolean()) throw BadRequest{400, "stream must be a boolean", ""};
  return j["stream"].get<bool>();
}

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

struct Server {
  ServeOpts opt;
  std::atomic<bool> ready{false};
  std::string load_error;
  std::unique_ptr<TextEngine> loaded;
  std::mutex gen;  // one generation at a time
  std::atomic<uint64_t> counter{0};
  SessionIds session_ids{4096};
  httplib::Server http;

  std::string next_id(const char* prefix) { return std::string(prefix) + std::to_string(++counter); }
  static int64_t now() { return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count(); }

  bool check_ready(httplib::Response& res) {
    if (ready) return true;
    send_json(res, 503, error_body(load_error.empty() ? "model is loading" : "model failed to load: " + load_error,
                                   "server_error", "model_loading"));
    return false;
  }

  static ojson parse_body(const httplib::Request& req) {
    auto j = ojson::parse(req.body, nullptr, false);
    if (j.is_discarded()) throw BadRequest{400, "request body is not valid JSON", ""};
    if (!j.is_object()) throw BadRequest{400, "request body must be a JSON object", ""};
    return j;
  }

  static BadRequest from_status(const Status& s) {
    if (s.code() == Code::out_of_range) return {400, s.message(), "context_length_exceeded"};
    if (s.code() == Code::internal || s.code() == Code::out_of_memory) return {500, s.message(), ""};
    return {400, s.message(), ""};
  }

  ojson usage(const text::TextResult& r) const {
    return {{"prompt_tokens", r.prompt_tokens}, {"completion_tokens", r.completion_tokens},
            {"total_tokens", r.prompt_tokens + r.completion_tokens},
            {"prompt_tokens_details", {{"cached_tokens", r.cached_tokens}}}};
  }

  void chat(const httplib::Request& req, httplib::Response& res) {
    if (!check_ready(res)) return;
    ojson j = parse_body(req);
    const std::optional<std::string> session = session_id_of(j);
    if (!j.contains("messages")) throw BadRequest{400, "messages is required", ""};
    ojson render = {{"messages", j["messages"]}};
    if (j.contains("tools") && !j["tools"].is_null()) render["tools"] = j["tools"];
    std::string mode = "chat";
    if (j.contains("reasoning_effort") && !j["reasoning_effort"].is_null()) {
      mode = "thinking";
      render["reasoning_effort"] = j["reasoning_effort"];
    }
    if (j.contains("thinking_mode")) {
      if (!j["thinking_mode"].is_string()) throw BadRequest{400, "thinking_mode must be \"thinking\" or \"chat\"", ""};
      mode = j["thinking_mode"].get<std::string>();
    }
    if (j.contains("chat_template_kwargs") && j["chat_template_kwargs"].is_object() &&
        j["chat_template_kwargs"].contains("thinking"))
      mode = j["chat_template_kwargs"].value("thinking", false) ? "thinking" : "chat";
    render["thinking_mode"] = mode;
    auto prompt = loaded->render(render);
    if (!prompt.ok()) throw from_status(prompt.status());
    text::TextOptions o = sampling_of(j, 1024, opt.max_tokens_cap);
    const bool stream = want_stream(j);
    const bool thinking = mode == "thinking";
    const std::string id = next_id("chatcmpl-"), model = opt.name;
    const int64_t created = now();
    // Runs after this handler returned when streaming: capture by value only.
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
    auto note_session = [this, session](const std::string& prompt_text, const text::TextResult& r) {
      if (!session) return;
      std::vector<int32_t> ids = loaded->tokenizer().encode(prompt_text, true);
      const auto last = session_ids.find(*session);
      const bool extends = last && last->tokens <= ids.size() &&
                           SessionIds::hash_of(std::span<const int32_t>(ids).first(last->tokens)) == last->hash;
      ids.insert(ids.end(), r.ids.begin(), r.ids.end());
      session_ids.set(*session, {ids.size(), SessionIds::hash_of(ids)});
      fmt::print(stderr, "dsv41 serve: session {}: {}, {} of {} prompt tokens cached\n", *session,
                 !last ? "new" : extends ? "extends its last turn" : "does not extend its last turn", r.cached_tokens,
                 r.prompt_tokens);
    };
    if (!stream) {
      std::lock_guard<std::mutex> lock(gen);
      auto r = loaded->complete(*prompt, o);
      if (!r.ok()) throw from_status(r.status());
      note_session(*prompt, *r);
      text::ParsedMessage msg;
      const std::string fr = finish_of(*r, &msg);
      ojson m = text::to_openai_json(msg);
      if (m.contains("tool_calls") && m["tool_calls"].empty()) m.erase("tool_calls");
      if (!thinking) m.erase("reasoning_content");
      ojson body = {{"id", id}, {"object", "chat.completion"}, {"created", created}, {"model", model},
                    {"choices", ojson::array({{{"index", 0}, {"message", m}, {"finish_reason", fr}}})},
                    {"usage", usage(*r)}};
      if (session) body["session_id"] = *session;
      send_json(res, 200, body);
      return;
    }
    const bool include_usage = j.contains("stream_options") && j["stream_options"].is_object() &&
                               j["stream_options"].value("include_usage", false);
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider("text/event-stream", [this, prompt = *prompt, o, thinking, id, model, created,
                                                           include_usage, finish_of, session,
                                                           note_session](size_t, httplib::DataSink& sink) mutable {
      auto chunk = [&](const ojson& delta, const ojson& finish) {
        ojson c{{"id", id}, {"object", "chat.completion.chunk"}, {"created", created}, {"model", model},
                {"choices", ojson::array({{{"index", 0}, {"delta", delta}, {"finish_reason", finish}}})}};
        if (session) c["session_id"] = *session;
        return c;
      };
      auto write = [&](const std::string& s) { return sink.write(s.data(), s.size()); };
      struct Ctx {
        ChatSplitter split;
        std::function<bool(const ojson&, const ojson&)> emit;
      } ctx{ChatSplitter(thinking, loaded->chat_tokens()), nullptr};
      ctx.emit = [&](const ojson& delta, const ojson& finish) { return write(sse(chunk(delta, finish))); };
      if (!ctx.emit({{"role", "assistant"}, {"content", ""}}, nullptr)) return false;
      o.ctx = &ctx;
      o.on_text = [](void* c, int32_t, std::string_view piece) {
        auto& x = *static_cast<Ctx*>(c);
        if (piece.empty()) return true;
        auto [r, t] = x.split.push(piece, false);
        if (!r.empty() && !x.emit({{"reasoning_content", r}}, nullptr)) return false;
        if (!t.empty() && !x.emit({{"content", t}}, nullptr)) return false;
        return true;
      };
      std::lock_guard<std::mutex> lock(gen);
      auto r = loaded->complete(prompt, o);
      if (!r.ok()) {
        write(sse(error_body(r.status().message(), "invalid_request_error")));
        sink.done();
        return true;
      }
      if (r->finish == text::TextFinish::cancelled) return false;  // the client went away
      note_session(prompt, *r);
      auto [rr, tt] = ctx.split.push("", true);
      if (!rr.empty()) ctx.emit({{"reasoning_content", rr}}, nullptr);
      if (!tt.empty()) ctx.emit({{"content", tt}}, nullptr);
      text::ParsedMessage msg;
      const std::string fr = finish_of(*r, &msg);
      if (!msg.tool_calls.empty()) {
        ojson calls = text::to_openai_json(msg)["tool_calls"];
        for (size_t i = 0; i < calls.size(); ++i) calls[i]["index"] = i;
        ctx.emit({{"tool_calls", calls}}, nullptr);
      }
      ctx.emit(ojson::object(), fr);
      if (include_usage) {
        ojson u = {{"id", id}, {"object", "chat.completion.chunk"}, {"created", created}, {"model", model},
                   {"choices", ojson::array()}, {"usage", usage(*r)}};
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
    ojson j = parse_body(req);
    std::string prompt;
    if (j.contains("prompt") && j["prompt"].is_string()) prompt = j["prompt"].get<std::string>();
    else if (j.contains("prompt") && j["prompt"].is_array() && j["prompt"].size() == 1 && j["prompt"][0].is_string())
      prompt = j["prompt"][0].get<std::string>();
    else throw BadRequest{400, "prompt must be a string", ""};
    if (prompt.empty()) throw BadRequest{400, "prompt is empty", ""};
    const auto& toks = loaded->chat_tokens();
    if (prompt.rfind(toks.bos, 0) != 0) prompt = toks.bos + prompt;
    text::TextOptions o = sampling_of(j, 16, opt.max_tokens_cap);
    const std::string id = next_id("cmpl-"), model = opt.name;
    const int64_t created = now();
    auto body_of = [id, model, created](const std::string& text, const ojson& finish) {
      return ojson{{"id", id}, {"object", "text_completion"}, {"created", created}, {"model", model},
                   {"choices", ojson::array({{{"index", 0}, {"text", text}, {"logprobs", nullptr}, {"finish_reason", finish}}})}};
    };
    if (!want_stream(j)) {
      std::lock_guard<std::mutex> lock(gen);
      auto r = loaded->complete(prompt, o);
      if (!r.ok()) throw from_status(r.status());
      ojson b = body_of(r->text, text::text_finish_name(r->finish));
      b["usage"] = usage(*r);
      send_json(res, 200, b);
      return;
    }
    res.set_chunked_content_provider("text/event-stream", [this, prompt, o, body_of](size_t, httplib::DataSink& sink) mutable {
      struct Ctx {
        httplib::DataSink* sink;
        decltype(body_of)* body;
      } ctx{&sink, &body_of};
      o.ctx = &ctx;
      o.on_text = [](void* c, int32_t, std::string_view piece) {
        auto& x = *static_cast<Ctx*>(c);
        if (piece.empty()) return true;
        const std::string s = sse((*x.body)(std::string(piece), nullptr));
        return x.sink->write(s.data(), s.size());
      };
      std::lock_guard<std::mutex> lock(gen);
      auto r = loaded->complete(prompt, o);
      if (!r.ok() || r->finish == text::TextFinish::cancelled) {
        if (!r.ok()) {
          const std::string s = sse(error_body(r.status().message(), "invalid_request_error"));
          sink.write(s.data(), s.size());
          sink.done();
          return true;
        }
        return false;
      }
      const std::string last = sse(body_of("", text::text_finish_name(r->finish))) + "data: [DONE]\n\n";
      sink.write(last.data(), last.size());
      sink.done();
      return true;
    });
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
    http.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
      if (ready) send_json(res, 200, {{"status", "ok"}});
      else send_json(res, 503, {{"status", load_error.empty() ? "loading" : "failed"}, {"error", load_error}});
    });
    http.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
      send_json(res, 200, {{"object", "list"},
                           {"data", ojson::array({{{"id", opt.name}, {"object", "model"}, {"created", 0}, {"owned_by", "dsv41"}}})}});
    });
    http.Post("/v1/chat/completions", guarded(&Server::chat));
    http.Post("/v1/completions", guarded(&Server::completions));
    http.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
      if (!res.body.empty()) return;
      const std::string msg = res.status == 404 ? "no route " + req.method + " " + req.path : "request failed";
      send_json(res, res.status, error_body(msg, "invalid_request_error"));
    });
    http.set_payload_max_length(64 << 20);
    std::thread loader([this] {
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
      ready = true;
      fmt::print(stderr, "dsv41 serve: model ready\n");
    });
    fmt::print(stderr, "dsv41 serve: listening on http://{}:{}\n", opt.host, opt.port);
    const bool ok = http.listen(opt.host, opt.port);
    loader.join();
    if (!ok) {
      fmt::print(stderr, "dsv41 serve: cannot listen on {}:{}\n", opt.host, opt.port);
      return 1;
    }
    return 0;
  }
};

int run_serve(void* p) {
  auto& o = *static_cast<ServeOpts*>(p);
  if (o.name.empty()) o.name = std::filesystem::path(o.load.model_dir).filename().string();
  auto* s = new Server;  // lives until exit: handlers may still hold it while the process stops
  s->opt = o;
  return s->run();
}

}  // namespace

Command add_serve(CLI::App& app) {
  auto* o = new ServeOpts;
  auto* sub = app.add_subcommand("serve", "OpenAI-compatible HTTP server");
  sub->add_option("--model", o->load.model_dir, "model directory")->required();
  sub->add_option("--tokenizer", o->load.tokenizer, "tokenizer.json (default MODEL/tokenizer.json)");
  sub->add_option("--device", o->load.device, "cpu (reference) or cuda")->check(CLI::IsMember({"cpu", "cuda"}));
  sub->add_option("--host", o->host, "address to listen on");
  sub->add_option("--port", o->port, "port")->check(CLI::Range(1, 65535));
  sub->add_option("--model-name", o->name, "name reported by /v1/models (default: the directory name)");
  sub->add_option("--max-tokens-cap", o->max_tokens_cap, "largest max_tokens a request may ask for");
  sub->add_option("--debug-load-delay-ms", o->load_delay_ms, "wait before loading (tests the 503 answer)");
  add_session_options(sub, o->sessions);
  return {sub, run_serve, o};
}

}  // namespace dsv41::cli
