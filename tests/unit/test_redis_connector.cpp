// RedisConnector against a real redis-server that the test starts on 127.0.0.1 (a free port) and stops. Where
// hiredis was not found at configure time, or redis-server is missing or does not start, the checks are skipped
// with a WARN.
#include <catch2/catch.hpp>

#if DSV41_HAVE_HIREDIS
#include <chrono>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "dsv41/session/redis_connector.hpp"

using namespace dsv41;
using namespace dsv41::session;

namespace {

using Clk = std::chrono::steady_clock;

int free_port() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return 0;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  socklen_t n = sizeof a;
  int port = 0;
  if (bind(fd, (sockaddr*)&a, sizeof a) == 0 && getsockname(fd, (sockaddr*)&a, &n) == 0) port = ntohs(a.sin_port);
  close(fd);
  return port;
}

// A raw hiredis context for looking at and damaging what the connector stored.
struct Raw {
  redisContext* c = nullptr;
  explicit Raw(int port) {
    const timeval tv{0, 300000};
    c = redisConnectWithTimeout("127.0.0.1", port, tv);
    if (c && !c->err) redisSetTimeout(c, tv);
  }
  ~Raw() {
    if (c) redisFree(c);
  }
  bool ok() const { return c && !c->err; }
  // The reply as a string ("" on nil or failure), for commands of string arguments.
  std::string cmd(std::vector<std::string> args, int* type = nullptr, long long* integer = nullptr) {
    if (!ok()) return "";
    std::vector<const char*> argv;
    std::vector<size_t> len;
    for (auto& a : args) argv.push_back(a.data()), len.push_back(a.size());
    auto* r = static_cast<redisReply*>(redisCommandArgv(c, int(argv.size()), argv.data(), len.data()));
    if (!r) return "";
    std::string out = r->str ? std::string(r->str, r->len) : "";
    if (type) *type = r->type;
    if (integer) *integer = r->integer;
    freeReplyObject(r);
    return out;
  }
};

// A redis-server child process on 127.0.0.1.
class RedisServer {
 public:
  ~RedisServer() { stop(); }
  // Starts on port (0: a free one) and waits (<= 5 s) until it answers PING. Returns "" or why it did not start.
  std::string start(int want_port = 0) {
    port = want_port ? want_port : free_port();
    if (port == 0) return "no free port on 127.0.0.1";
    const std::string p = std::to_string(port);
    pid = fork();
    if (pid < 0) return "fork failed";
    if (pid == 0) {
      const int devnull = open("/dev/null", O_RDWR);
      if (devnull >= 0) dup2(devnull, 0), dup2(devnull, 1), dup2(devnull, 2);
      execlp("redis-server", "redis-server", "--port", p.c_str(), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--daemonize", "no", (char*)nullptr);
      _exit(127);
    }
    const auto deadline = Clk::now() + std::chrono::seconds(5);
    while (Clk::now() < deadline) {
      int st = 0;
      if (waitpid(pid, &st, WNOHANG) == pid) {
        pid = -1;
        return WIFEXITED(st) && WEXITSTATUS(st) == 127 ? "redis-server is not installed (exec failed)"
                                                         : "redis-server exited at start";
      }
      Raw raw(port);
      if (raw.ok() && raw.cmd({"PING"}) == "PONG") return "";
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    stop();
    return "redis-server did not answer PING within 5 s";
  }
  // SIGKILL and reap: the server vanishes mid-run.
  void kill_hard() {
    if (pid <= 0) return;
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
    pid = -1;
  }
  // SIGTERM, wait up to 5 s, then SIGKILL.
  void stop() {
    if (pid <= 0) return;
    kill(pid, SIGTERM);
    const auto deadline = Clk::now() + std::chrono::seconds(5);
    while (Clk::now() < deadline) {
      if (waitpid(pid, nullptr, WNOHANG) == pid) {
        pid = -1;
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    kill_hard();
  }
  int port = 0;
  pid_t pid = -1;
};

Key key_of(uint64_t i) {
  const int32_t tok[2] = {int32_t(i), 7};
  return block_key(Key{}, ModelIdentity{3, 4}, tok);
}
Bytes bytes_of(uint64_t seed, size_t n) {
  Bytes b(n);
  for (size_t i = 0; i < n; ++i) b[i] = uint8_t((seed * 29 + i * 11 + (i >> 9)) & 0xff);
  return b;
}

#define START_REDIS_OR_SKIP(server)                                               \
  do {                                                                            \
    const std::string why_ = (server).start();                                    \
    if (!why_.empty()) {                                                          \
      WARN("[redis] skipped: " << why_);                                          \
      return;                                                                     \
    }                                                                             \
  } while (0)

std::unique_ptr<RedisConnector> connect_to(int port) {
  auto c = RedisConnector::connect("127.0.0.1", port, 1.0, "dsv41test:");
  INFO(c.status().to_string());
  REQUIRE(c.ok());
  return std::move(c).value();
}

}  // namespace

TEST_CASE("redis connector: round trip, miss, erase, framing", "[redis]") {
  RedisServer server;
  START_REDIS_OR_SKIP(server);
  auto c = connect_to(server.port);
  CHECK(std::string(c->name()) == "redis");
  const Bytes a = bytes_of(1, 300000), b = bytes_of(2, 5), empty;
  REQUIRE(c->put(key_of(1), a, 60).ok());
  REQUIRE(c->put(key_of(2), b, 60).ok());
  REQUIRE(c->put(key_of(3), empty, 60).ok());
  auto ra = c->get(key_of(1));
  REQUIRE(ra.ok());
  REQUIRE(ra->has_value());
  CHECK(**ra == a);
  auto rb = c->get(key_of(2));
  REQUIRE((rb.ok() && rb->has_value()));
  CHECK(**rb == b);
  auto re = c->get(key_of(3));
  REQUIRE((re.ok() && re->has_value()));
  CHECK((*re)->empty());
  auto rm = c->get(key_of(4));
  REQUIRE(rm.ok());
  CHECK_FALSE(rm->has_value());

  // What Redis holds: prefix + hex key -> [XXH3-64 little-endian][value].
  Raw raw(server.port);
  REQUIRE(raw.ok());
  const std::string stored = raw.cmd({"GET", "dsv41test:" + key_of(2).hex()});
  REQUIRE(stored.size() == 8 + b.size());
  uint64_t sum = 0;
  for (int i = 0; i < 8; ++i) sum |= uint64_t(uint8_t(stored[i])) << (8 * i);
  CHECK(sum == checksum(b));
  CHECK(Bytes(stored.begin() + 8, stored.end()) == b);

  REQUIRE(c->erase(key_of(1)).ok());
  REQUIRE(c->erase(key_of(99)).ok());  // absent: fine
  auto gone = c->get(key_of(1));
  REQUIRE(gone.ok());
  CHECK_FALSE(gone->has_value());
  int type = 0;
  long long exists = -1;
  raw.cmd({"EXISTS", "dsv41test:" + key_of(1).hex()}, &type, &exists);
  CHECK(type == REDIS_REPLY_INTEGER);
  CHECK(exists == 0);
  CHECK(c->stats().hits == 3);
  CHECK(c->stats().misses == 2);
  CHECK(c->put(key_of(5), b, 0).code() == Code::invalid_argument);
}

TEST_CASE("redis connector: TTL is Redis' own expiry", "[redis]") {
  RedisServer server;
  START_REDIS_OR_SKIP(server);
  auto c = connect_to(server.port);
  const Bytes v = bytes_of(9, 1000);
  REQUIRE(c->put(key_of(1), v, 0.3).ok());
  REQUIRE(c->put(key_of(2), v, 60).ok());
  Raw raw(server.port);
  long long pttl = -10;
  raw.cmd({"PTTL", "dsv41test:" + key_of(1).hex()}, nullptr, &pttl);
  CHECK(pttl > 0);
  CHECK(pttl <= 300);
  auto hit = c->get(key_of(1));
  REQUIRE((hit.ok() && hit->has_value()));
  CHECK(**hit == v);
  std::this_thread::sleep_for(std::chrono::milliseconds(600));
  auto miss = c->get(key_of(1));
  REQUIRE(miss.ok());
  CHECK_FALSE(miss->has_value());
  auto still = c->get(key_of(2));
  REQUIRE((still.ok() && still->has_value()));
}

TEST_CASE("redis connector: a value damaged in Redis is a miss", "[redis]") {
  RedisServer server;
  START_REDIS_OR_SKIP(server);
  auto c = connect_to(server.port);
  const Bytes v = bytes_of(4, 4096);
  REQUIRE(c->put(key_of(1), v, 60).ok());
  REQUIRE(c->put(key_of(2), v, 60).ok());
  Raw raw(server.port);
  REQUIRE(raw.ok());
  // One bit flipped in the payload.
  const std::string k1 = "dsv41test:" + key_of(1).hex();
  std::string stored = raw.cmd({"GET", k1});
  REQUIRE(stored.size() == 8 + v.size());
  stored[8 + 1000] ^= 0x10;
  REQUIRE(raw.cmd({"SET", k1, stored}) == "OK");
  // Shorter than the checksum.
  REQUIRE(raw.cmd({"SET", "dsv41test:" + key_of(2).hex(), "short"}) == "OK");
  auto r1 = c->get(key_of(1));
  REQUIRE(r1.ok());
  CHECK_FALSE(r1->has_value());
  auto r2 = c->get(key_of(2));
  REQUIRE(r2.ok());
  CHECK_FALSE(r2->has_value());
  CHECK(c->stats().corrupt == 2);
  // A key of another type is a server error, reported with Redis' text.
  REQUIRE(raw.cmd({"DEL", "dsv41test:" + key_of(3).hex()}).empty());
  raw.cmd({"LPUSH", "dsv41test:" + key_of(3).hex(), "x"});
  auto r3 = c->get(key_of(3));
  CHECK_FALSE(r3.ok());
  CHECK(r3.status().message().find("WRONGTYPE") != std::string::npos);
}

TEST_CASE("redis connector: a dropped connection is re-opened; a dead server is a clear error", "[redis]") {
  RedisServer server;
  START_REDIS_OR_SKIP(server);
  auto c = connect_to(server.port);
  const Bytes v = bytes_of(5, 2000);
  REQUIRE(c->put(key_of(1), v, 60).ok());
  {
    Raw raw(server.port);
    long long killed = 0;
    raw.cmd({"CLIENT", "KILL", "TYPE", "normal"}, nullptr, &killed);  // drops the connector's connection
    CHECK(killed >= 1);
  }
  auto r = c->get(key_of(1));
  INFO(r.status().to_string());
  REQUIRE(r.ok());
  REQUIRE(r->has_value());
  CHECK(**r == v);
  CHECK(c->stats().reconnects == 1);

  server.kill_hard();
  const auto t0 = Clk::now();
  // A large write into the connection the dead server left: an error, not SIGPIPE.
  const Status p = c->put(key_of(2), bytes_of(6, 8 << 20), 60);
  CHECK_FALSE(p.ok());
  CHECK(p.code() == Code::io_error);
  CHECK(p.message().find("127.0.0.1:" + std::to_string(server.port)) != std::string::npos);
  CHECK(p.message().find("SET") != std::string::npos);
  CHECK(p.message().find("reconnect") != std::string::npos);
  auto g = c->get(key_of(1));
  CHECK_FALSE(g.ok());
  CHECK(g.status().code() == Code::io_error);
  CHECK(g.status().message().find("GET") != std::string::npos);
  CHECK_FALSE(c->erase(key_of(1)).ok());
  CHECK(Clk::now() - t0 < std::chrono::seconds(10));

  // A server on the same port again: the connector comes back by itself.
  const std::string why = server.start(server.port);
  if (!why.empty()) {
    WARN("restart on the same port failed (" << why << "); recovery not checked");
    return;
  }
  REQUIRE(c->put(key_of(3), v, 60).ok());
  auto back = c->get(key_of(3));
  REQUIRE((back.ok() && back->has_value()));
  CHECK(**back == v);

  // Connecting to nothing fails cleanly.
  const int nothing = free_port();
  auto none = RedisConnector::connect("127.0.0.1", nothing, 0.5, "x:");
  CHECK_FALSE(none.ok());
  CHECK(none.status().code() == Code::io_error);
  CHECK(RedisConnector::connect("127.0.0.1", 0, 0.5, "x:").status().code() == Code::invalid_argument);
}

#else
TEST_CASE("redis connector: built without hiredis", "[redis]") {
  WARN("[redis] skipped: hiredis was not found when this build was configured");
}
#endif
