// A Connector over a Redis server (hiredis, synchronous API): the shared tier when one machine is not enough.
// Keys are key_prefix + Key::hex(); values are stored as [8-byte little-endian XXH3-64 of value][value] with
// SET ... PX ttl_ms, so Redis' own expiry carries the TTL. A value that is too short or fails its checksum is a
// miss. A dropped connection is re-opened once per command (SET, GET and DEL are safe to repeat); every other
// failure is a Status carrying hiredis' or the server's error text. Thread-safe (one mutex around the context).
// Needs hiredis (Debian: libhiredis-dev); link -lhiredis.
#pragma once
#if !__has_include(<hiredis/hiredis.h>)
#error "dsv41/session/redis_connector.hpp needs hiredis (<hiredis/hiredis.h>, Debian: libhiredis-dev) and -lhiredis"
#else
#include <hiredis/hiredis.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <pthread.h>
#include <signal.h>
#include <time.h>

#include "dsv41/core/status.hpp"
#include "dsv41/session/block_key.hpp"
#include "dsv41/session/connector.hpp"

namespace dsv41::session {

struct RedisConnectorStats {
  uint64_t hits = 0, misses = 0, corrupt = 0, reconnects = 0;
};

// For one command: a write to a socket the server closed must not raise SIGPIPE (which would end the process).
// Blocks SIGPIPE in this thread only, then consumes one raised meanwhile; the process' signal handling is untouched.
class SigpipeGuard {
 public:
  SigpipeGuard() {
    sigemptyset(&pipe_);
    sigaddset(&pipe_, SIGPIPE);
    sigset_t pending;
    sigemptyset(&pending);
    was_pending_ = sigpending(&pending) == 0 && sigismember(&pending, SIGPIPE) == 1;
    pthread_sigmask(SIG_BLOCK, &pipe_, &old_);
  }
  ~SigpipeGuard() {
    sigset_t pending;
    sigemptyset(&pending);
    if (!was_pending_ && sigpending(&pending) == 0 && sigismember(&pending, SIGPIPE) == 1) {
      const timespec zero{0, 0};
      sigtimedwait(&pipe_, nullptr, &zero);
    }
    pthread_sigmask(SIG_SETMASK, &old_, nullptr);
  }
  SigpipeGuard(const SigpipeGuard&) = delete;
  SigpipeGuard& operator=(const SigpipeGuard&) = delete;

 private:
  sigset_t pipe_, old_;
  bool was_pending_ = false;
};

class RedisConnector : public Connector {
 public:
  // Connects to host:port; timeout_s (finite, > 0) bounds the connect and every command.
  static Result<std::unique_ptr<RedisConnector>> connect(std::string host, int port, double timeout_s,
                                                         std::string key_prefix) {
    if (port <= 0 || port > 65535)
      return error(Code::invalid_argument, "redis: port out of range: " + std::to_string(port));
    if (!(timeout_s > 0) || !std::isfinite(timeout_s))
      return error(Code::invalid_argument, "redis: timeout_s must be finite and > 0");
    std::unique_ptr<RedisConnector> c(new RedisConnector(std::move(host), port, timeout_s, std::move(key_prefix)));
    std::lock_guard<std::mutex> lock(c->mu_);
    if (Status s = c->open_(); !s.ok()) return error(s.code(), c->where_() + s.message());
    return Result<std::unique_ptr<RedisConnector>>(std::move(c));
  }

  ~RedisConnector() override {
    if (ctx_) redisFree(ctx_);
  }
  RedisConnector(const RedisConnector&) = delete;
  RedisConnector& operator=(const RedisConnector&) = delete;

  Status put(const Key& key, std::span<const uint8_t> value, double ttl_s) override {
    if (!(ttl_s > 0) || !std::isfinite(ttl_s))
      return error(Code::invalid_argument, "redis: ttl_s must be finite and > 0, got " + std::to_string(ttl_s));
    const long long ttl_ms = std::max(1LL, (long long)std::ceil(ttl_s * 1000.0));
    Bytes framed(8 + value.size());
    const uint64_t sum = checksum(value);
    for (int i = 0; i < 8; ++i) framed[i] = uint8_t(sum >> (8 * i));
    if (!value.empty()) std::memcpy(framed.data() + 8, value.data(), value.size());
    const std::string k = redis_key(key), ms = std::to_string(ttl_ms);
    const char* argv[5] = {"SET", k.data(), (const char*)framed.data(), "PX", ms.data()};
    const size_t len[5] = {3, k.size(), framed.size(), 2, ms.size()};
    std::lock_guard<std::mutex> lock(mu_);
    Reply r;
    DSV41_TRY(command_(5, argv, len, r));
    if (r->type != REDIS_REPLY_STATUS || std::string(r->str, r->len) != "OK")
      return error(Code::io_error, where_() + "SET: unexpected reply");
    return Status::Ok();
  }

  Result<std::optional<Bytes>> get(const Key& key) override {
    const std::string k = redis_key(key);
    const char* argv[2] = {"GET", k.data()};
    const size_t len[2] = {3, k.size()};
    std::lock_guard<std::mutex> lock(mu_);
    Reply r;
    if (Status s = command_(2, argv, len, r); !s.ok()) return s;
    if (r->type == REDIS_REPLY_NIL) {
      ++stats_.misses;
      return Result<std::optional<Bytes>>(std::optional<Bytes>());
    }
    if (r->type != REDIS_REPLY_STRING) return error(Code::io_error, where_() + "GET: unexpected reply type");
    const size_t n = size_t(r->len);
    const auto* p = reinterpret_cast<const uint8_t*>(r->str);
    uint64_t sum = 0;
    for (int i = 0; i < 8 && n >= 8; ++i) sum |= uint64_t(p[i]) << (8 * i);
    if (n < 8 || checksum(std::span<const uint8_t>(p + 8, n - 8)) != sum) {
      ++stats_.corrupt;
      ++stats_.misses;
      return Result<std::optional<Bytes>>(std::optional<Bytes>());
    }
    ++stats_.hits;
    return Result<std::optional<Bytes>>(std::optional<Bytes>(Bytes(p + 8, p + n)));
  }

  Status erase(const Key& key) override {
    const std::string k = redis_key(key);
    const char* argv[2] = {"DEL", k.data()};
    const size_t len[2] = {3, k.size()};
    std::lock_guard<std::mutex> lock(mu_);
    Reply r;
    DSV41_TRY(command_(2, argv, len, r));
    if (r->type != REDIS_REPLY_INTEGER) return error(Code::io_error, where_() + "DEL: unexpected reply type");
    return Status::Ok();
  }

  const char* name() const override { return "redis"; }

  // The Redis key that holds key.
  std::string redis_key(const Key& key) const { return prefix_ + key.hex(); }

  RedisConnectorStats stats() const {
    std::lock_guard<std::mutex> lock(mu_);
    return stats_;
  }

 private:
  struct ReplyFree {
    void operator()(redisReply* r) const { freeReplyObject(r); }
  };
  using Reply = std::unique_ptr<redisReply, ReplyFree>;

  RedisConnector(std::string host, int port, double timeout_s, std::string prefix)
      : host_(std::move(host)), port_(port), prefix_(std::move(prefix)) {
    const double whole = std::floor(timeout_s);
    tv_.tv_sec = (decltype(tv_.tv_sec))whole;
    tv_.tv_usec = (decltype(tv_.tv_usec))((timeout_s - whole) * 1e6);
  }

  std::string where_() const { return "redis " + host_ + ":" + std::to_string(port_) + ": "; }

  // (Re)opens the connection; the caller holds mu_ and puts where_() before the message.
  Status open_() {
    if (ctx_) redisFree(ctx_);
    ctx_ = redisConnectWithTimeout(host_.c_str(), port_, tv_);
    if (!ctx_) return error(Code::io_error, "cannot allocate a hiredis context");
    if (ctx_->err) {
      Status s = error(Code::io_error, std::string("connect: ") + ctx_->errstr);
      redisFree(ctx_);
      ctx_ = nullptr;
      return s;
    }
    if (redisSetTimeout(ctx_, tv_) != REDIS_OK) {
      Status s = error(Code::io_error, std::string("cannot set the command timeout: ") + ctx_->errstr);
      redisFree(ctx_);
      ctx_ = nullptr;
      return s;
    }
    return Status::Ok();
  }

  // Runs one command, re-opening a dropped connection once; an error reply becomes a Status. Caller holds mu_.
  Status command_(int argc, const char** argv, const size_t* len, Reply& out) {
    const SigpipeGuard no_sigpipe;
    std::string first_error;  // why the first attempt had no reply
    for (int attempt = 0; attempt < 2; ++attempt) {
      if (!ctx_) {
        ++stats_.reconnects;
        if (Status s = open_(); !s.ok())
          return error(s.code(), (first_error.empty() ? where_() + argv[0] + ": not connected" : first_error) +
                                     "; reconnect: " + s.message());
      }
      out.reset(static_cast<redisReply*>(redisCommandArgv(ctx_, argc, argv, len)));
      if (out) {
        if (out->type == REDIS_REPLY_ERROR)
          return error(Code::io_error, where_() + argv[0] + ": " + std::string(out->str, out->len));
        return Status::Ok();
      }
      // No reply: the context is broken (I/O error, EOF, timeout) and cannot be used again.
      const std::string why = where_() + argv[0] + ": " + ctx_->errstr;
      redisFree(ctx_);
      ctx_ = nullptr;
      if (attempt > 0) return error(Code::io_error, first_error + "; retry: " + why);
      first_error = why;
    }
    return error(Code::internal, where_() + "unreachable");
  }

  std::string host_;
  int port_ = 0;
  std::string prefix_;
  struct timeval tv_ {};
  mutable std::mutex mu_;
  redisContext* ctx_ = nullptr;
  RedisConnectorStats stats_;
};

}  // namespace dsv41::session
#endif  // __has_include(<hiredis/hiredis.h>)
