#include "http/probe_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <spdlog/spdlog.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <list>
#include <string_view>

#include "common/file_util.h"
#include "common/worker.h"
#include "http/headers.h"

namespace xpu::http {
namespace {

using Clock = std::chrono::steady_clock;

constexpr size_t kMaxHead = 4096;
constexpr size_t kMaxDrain = size_t{64} * 1024;  // dropped after the head, then closed
constexpr int kMaxAcceptsPerWake = 64;           // then the heads already in get read

void CloseFd(int fd) {
  if (fd >= 0) ::close(fd);
}

}  // namespace

Status SplitListenAddress(const std::string& address, std::string* host, int* port) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos)
    return Status::InvalidArgument("listen address '" + address + "' lacks :port");
  std::string h = address.substr(0, colon);
  const std::string p = address.substr(colon + 1);
  if (p.empty() || p.size() > 5 || p.find_first_not_of("0123456789") != std::string::npos ||
      std::stoi(p) > 65535)
    return Status::InvalidArgument("listen address '" + address + "': bad port '" + p + "'");
  if (h.size() >= 2 && h.front() == '[' && h.back() == ']') {
    h = h.substr(1, h.size() - 2);
  } else if (h.find(':') != std::string::npos) {
    return Status::InvalidArgument("listen address '" + address +
                                   "': an IPv6 address needs brackets, e.g. [::1]:9446");
  }
  *host = h;
  *port = std::stoi(p);
  return Status::Ok();
}

// The loop: owns the listening sockets, the epoll set, the connections.
// Built and bound on the owner thread (Start); Run on the loop thread; Wake
// from the owner; counts() from any thread.
class ProbeServer::Loop {
 public:
  Loop(const Options& options, std::map<std::string, Route> routes, Headers headers,
       Observe observe)
      : options_(options),
        routes_(std::move(routes)),
        headers_(std::move(headers)),
        observe_(std::move(observe)) {}
  ~Loop() {
    for (Conn& c : conns_) CloseFd(c.fd);
    for (int fd : listeners_) CloseFd(fd);
    CloseFd(wake_);
    CloseFd(epoll_);
  }

  Status Bind() {
    epoll_ = epoll_create1(EPOLL_CLOEXEC);
    wake_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (epoll_ < 0 || wake_ < 0) return Status::IoError("epoll: " + ErrnoText(errno));
    Watch(wake_, EPOLLIN, &wake_);
    for (const std::string& a : options_.listen_addresses) {
      int fd = -1;
      if (Status s = Listen(a, &fd); !s.ok()) return s;
      listeners_.push_back(fd);
      Watch(fd, EPOLLIN, &listeners_.back());
    }
    if (listeners_.empty()) return Status::InvalidArgument("no probe listen address");
    return Status::Ok();
  }

  std::vector<int> Ports() const {
    std::vector<int> out;
    for (int fd : listeners_) {
      sockaddr_storage sa{};
      socklen_t len = sizeof sa;
      getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len);
      out.push_back(ntohs(sa.ss_family == AF_INET6
                              ? reinterpret_cast<sockaddr_in6*>(&sa)->sin6_port
                              : reinterpret_cast<sockaddr_in*>(&sa)->sin_port));
    }
    return out;
  }

  void Run() {
    std::array<epoll_event, 64> events;
    while (!stop_.load(std::memory_order_acquire)) {
      const int n = epoll_wait(epoll_, events.data(), static_cast<int>(events.size()), WaitMs());
      if (n < 0 && errno != EINTR) {
        spdlog::error("probe listener: epoll_wait: {}", ErrnoText(errno));
        return;
      }
      for (int i = 0; i < n; ++i) {
        void* tag = events[i].data.ptr;
        if (tag == &wake_) continue;
        if (IsListener(tag)) {
          Accept(*static_cast<int*>(tag));
        } else {
          Service(*static_cast<std::list<Conn>::iterator*>(tag));
        }
      }
      Expire();
      for (const ConnIt it : dead_) conns_.erase(it);
      dead_.clear();
    }
  }

  void Wake() {
    stop_.store(true, std::memory_order_release);
    const uint64_t one = 1;
    if (write(wake_, &one, sizeof one) < 0) {
    }  // the loop also wakes at its next deadline
  }

  Counts counts() const {
    Counts c;
    c.answered = counts_[kAnswered].load(std::memory_order_relaxed);
    c.deadline = counts_[kDeadline].load(std::memory_order_relaxed);
    c.evicted = counts_[kEvicted].load(std::memory_order_relaxed);
    c.bad = counts_[kBad].load(std::memory_order_relaxed);
    c.closed = counts_[kClosed].load(std::memory_order_relaxed);
    return c;
  }

 private:
  struct Conn {
    int fd = -1;
    Clock::time_point accepted;
    std::string in;   // the head so far
    std::string out;  // the answer, once the head is in
    size_t sent = 0;
    size_t drained = 0;     // bytes read and dropped after the head
    bool answered = false;  // out is whole; after it is sent: drain to EOF
    bool bad = false;       // the answer is 400 or 431
    std::list<Conn>::iterator self;
  };
  using ConnIt = std::list<Conn>::iterator;

  Status Listen(const std::string& address, int* out) {
    std::string host;
    int port = 0;
    if (Status s = SplitListenAddress(address, &host, &port); !s.ok()) return s;
    addrinfo hints{};
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    addrinfo* res = nullptr;
    const std::string service = std::to_string(port);
    // Every interface: IPv6 and IPv4 on one socket, IPv4 alone where the
    // kernel has no IPv6.
    std::vector<std::string> tries =
        host.empty() ? std::vector<std::string>{"::", "0.0.0.0"} : std::vector<std::string>{host};
    std::string why;
    for (const std::string& h : tries) {
      if (int rc = getaddrinfo(h.c_str(), service.c_str(), &hints, &res); rc != 0) {
        why = gai_strerror(rc);
        continue;
      }
      const int fd = socket(res->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
      const int on = 1, off = 0;
      bool ok = fd >= 0;
      if (ok) {
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
        if (res->ai_family == AF_INET6 && host.empty())
          setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &off, sizeof off);
        ok = bind(fd, res->ai_addr, res->ai_addrlen) == 0 && listen(fd, SOMAXCONN) == 0;
      }
      why = ErrnoText(errno);
      freeaddrinfo(res);
      if (ok) {
        *out = fd;
        return Status::Ok();
      }
      CloseFd(fd);
    }
    return Status::IoError("cannot listen on " + address + " (probes): " + why);
  }

  void Watch(int fd, uint32_t events, void* tag) {
    epoll_event ev{};
    ev.events = events;
    ev.data.ptr = tag;
    epoll_ctl(epoll_, EPOLL_CTL_ADD, fd, &ev);
  }
  bool IsListener(const void* tag) const {
    for (const int& fd : listeners_)
      if (tag == &fd) return true;
    return false;
  }

  // Until the oldest connection's deadline: connections live in accept
  // order, all with the same deadline.
  int WaitMs() const {
    if (conns_.empty() && !paused_) return -1;
    const auto next = conns_.empty() ? resume_at_
                      : paused_ ? std::min(resume_at_, conns_.front().accepted + options_.deadline)
                                : conns_.front().accepted + options_.deadline;
    const auto left = next - Clock::now();
    const auto ms = std::chrono::ceil<std::chrono::milliseconds>(left).count();
    return ms <= 0 ? 0 : static_cast<int>(ms);
  }

  void Accept(int listener) {
    for (int i = 0; i < kMaxAcceptsPerWake; ++i) {
      const int fd = accept4(listener, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) {
        // Out of descriptors: the oldest connection makes room; with none
        // to drop, the listeners rest until the next deadline (a level-
        // triggered listener would wake the loop again at once).
        if ((errno == EMFILE || errno == ENFILE) && EvictOldest()) return;
        if (errno == EMFILE || errno == ENFILE || errno == ENOMEM || errno == ENOBUFS)
          PauseListeners();
        return;  // EAGAIN: the rest wait in the backlog
      }
      if (alive_ >= std::max<size_t>(1, options_.max_connections)) EvictOldest();
      const int on = 1;
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof on);
      conns_.push_back(Conn{});
      const ConnIt it = std::prev(conns_.end());
      it->fd = fd;
      it->accepted = Clock::now();
      it->self = it;
      ++alive_;
      Watch(fd, EPOLLIN | EPOLLOUT | EPOLLET | EPOLLRDHUP, &it->self);
      Service(it);  // the head is usually in with the connection
    }
  }

  // Reads what came, answers once the head is whole, writes what fits.
  void Service(ConnIt it) {
    Conn& c = *it;
    if (c.fd < 0) return;
    char buf[2048];
    for (;;) {
      const ssize_t n = read(c.fd, buf, sizeof buf);
      if (n > 0) {
        if (c.answered) {
          // A second request, or a body: never read as one, dropped up to
          // a bound (a client that keeps sending is closed).
          c.drained += static_cast<size_t>(n);
          if (c.drained > kMaxDrain) {
            Flush(it);  // what the socket takes of the answer goes first
            return Kill(it, Sent(c) ? Outcome(c) : kClosed);
          }
          continue;
        }
        c.in.append(buf, static_cast<size_t>(n));
        if (c.in.size() > kMaxHead && c.in.find("\r\n\r\n") == std::string::npos) {
          c.bad = true;
          Reply(&c, "", {431, "431 request head too large\n"}, false);
        } else {
          Parse(&c);
        }
        continue;
      }
      if (n == 0) {
        // The client closed its side: after reading its answer, usually;
        // or with its request (a half-close), which is still answered.
        if (c.answered && !Sent(c)) {
          Flush(it);
          if (c.fd >= 0 && Sent(c)) Kill(it, Outcome(c));
          return;  // else EPOLLOUT resumes the answer, within the deadline
        }
        return Kill(it, c.answered ? Outcome(c) : kClosed);
      }
      if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
        return Kill(it, c.answered && Sent(c) ? Outcome(c) : kClosed);
      if (errno != EINTR) break;
    }
    Flush(it);
  }

  void Parse(Conn* c) {
    size_t end = c->in.find("\r\n\r\n");
    if (end == std::string::npos) end = c->in.find("\n\n");
    if (end == std::string::npos) return;
    const std::string_view head(c->in.data(), end);
    const std::string_view line = head.substr(0, head.find_first_of("\r\n"));
    const size_t sp1 = line.find(' ');
    const size_t sp2 = sp1 == std::string_view::npos ? sp1 : line.find(' ', sp1 + 1);
    if (sp2 == std::string_view::npos || line.substr(sp2 + 1).substr(0, 7) != "HTTP/1.") {
      c->bad = true;
      Reply(c, "", {400, "400 bad request\n"}, false);
      return;
    }
    const std::string method(line.substr(0, sp1));
    std::string path(line.substr(sp1 + 1, sp2 - sp1 - 1));
    if (const size_t q = path.find('?'); q != std::string::npos) path.resize(q);
    const auto route = routes_.find(path);
    if (route == routes_.end()) {
      Reply(c, "other", {404, "404 page not found\n"}, method == "HEAD");
    } else if (method != "GET" && method != "HEAD") {
      Reply(c, path, {405, "405 method not allowed\n"}, false);
    } else {
      Reply(c, path, route->second(), method == "HEAD");
    }
  }

  void Reply(Conn* c, const std::string& handler, const ProbeServer::Answer& a, bool head) {
    std::string& out = c->out;
    out.append("HTTP/1.1 ")
        .append(std::to_string(a.status))
        .append(" ")
        .append(ReasonPhrase(a.status))
        .append("\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: ")
        .append(std::to_string(a.body.size()))
        .append("\r\nConnection: close\r\n");
    if (a.status == 405) out.append("Allow: GET, HEAD\r\n");
    if (headers_) {
      for (const auto& [k, v] : headers_()) out.append(k).append(": ").append(v).append("\r\n");
    }
    out.append("\r\n");
    if (!head) out.append(a.body);
    c->answered = true;
    c->in.clear();
    c->in.shrink_to_fit();
    if (observe_ && !handler.empty())
      observe_(handler, a.status,
               std::chrono::duration<double>(Clock::now() - c->accepted).count());
  }

  // Writes what the socket takes; once all is out, ends the sending side
  // and waits (still within the deadline) for the client to close, so that
  // unread pipelined bytes do not turn the close into a reset that loses
  // the answer.
  void Flush(ConnIt it) {
    Conn& c = *it;
    if (c.fd < 0 || !c.answered || c.sent == c.out.size()) return;
    while (c.sent < c.out.size()) {
      const ssize_t n = send(c.fd, c.out.data() + c.sent, c.out.size() - c.sent, MSG_NOSIGNAL);
      if (n > 0) {
        c.sent += static_cast<size_t>(n);
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;  // EPOLLOUT resumes
      return Kill(it, kClosed);
    }
    shutdown(c.fd, SHUT_WR);
  }

  // Connections past their deadline (oldest first): the head never came
  // whole, the answer was not read, or the client did not close. Each
  // unanswered one is read a last time first: a head that came while this
  // thread was away (descheduled after its wait, or behind a long batch of
  // events) is answered, not blamed on its client.
  void Expire() {
    const auto now = Clock::now();
    for (ConnIt it = conns_.begin(); it != conns_.end(); ++it) {
      if (now - it->accepted < options_.deadline) break;
      if (it->fd >= 0 && !it->answered) Service(it);
      if (it->fd < 0) continue;
      // An answer all sent whose client has not closed yet was answered.
      Kill(it, it->answered && Sent(*it) ? Outcome(*it) : kDeadline);
    }
    if (paused_ && Clock::now() >= resume_at_) ResumeListeners();
  }

  enum Reason { kAnswered, kBad, kDeadline, kEvicted, kClosed, kReasons };
  static bool Sent(const Conn& c) { return c.answered && c.sent == c.out.size(); }
  static Reason Outcome(const Conn& c) { return c.bad ? kBad : kAnswered; }

  // Drops the oldest open connection for a new one; false if none is open.
  bool EvictOldest() {
    for (ConnIt oldest = conns_.begin(); oldest != conns_.end(); ++oldest) {
      if (oldest->fd < 0) continue;
      Kill(oldest, Sent(*oldest) ? Outcome(*oldest) : kEvicted);
      return true;
    }
    return false;
  }
  void PauseListeners() {
    for (const int fd : listeners_) epoll_ctl(epoll_, EPOLL_CTL_DEL, fd, nullptr);
    paused_ = true;
    resume_at_ = Clock::now() + std::chrono::milliseconds(100);
    if (!pause_logged_) {
      pause_logged_ = true;  // once: it may recur every 100 ms while it lasts
      spdlog::warn("probe listener: cannot accept ({}); accepting again every 100 ms",
                   ErrnoText(errno));
    }
  }
  void ResumeListeners() {
    for (int& fd : listeners_) Watch(fd, EPOLLIN, &fd);
    paused_ = false;
  }

  // Closes the connection, counted once by `why`; its row goes at the end
  // of the round, as later events of the round may name it. Removed from
  // the epoll set first: a descriptor shared with a child (fork before
  // exec) would keep its registration, and its events would name a row
  // already gone.
  void Kill(ConnIt it, Reason why) {
    if (it->fd < 0) return;
    counts_[why].fetch_add(1, std::memory_order_relaxed);
    epoll_ctl(epoll_, EPOLL_CTL_DEL, it->fd, nullptr);
    CloseFd(it->fd);
    it->fd = -1;
    --alive_;
    dead_.push_back(it);
  }

  const Options& options_;
  const std::map<std::string, Route> routes_;
  const Headers headers_;
  const Observe observe_;
  int epoll_ = -1;
  int wake_ = -1;
  std::list<int> listeners_;  // stable addresses: the epoll tags
  std::list<Conn> conns_;     // accept order
  std::vector<ConnIt> dead_;  // closed this round, erased at its end
  size_t alive_ = 0;          // conns_ with an open socket
  std::atomic<bool> stop_{false};
  bool paused_ = false;  // the listeners are out of the epoll set (no descriptors)
  bool pause_logged_ = false;
  Clock::time_point resume_at_;
  std::array<std::atomic<uint64_t>, kReasons> counts_{};
};

ProbeServer::ProbeServer(Options options, std::map<std::string, Route> routes, Headers headers,
                         Observe observe)
    : options_(std::move(options)),
      loop_(std::make_unique<Loop>(options_, std::move(routes), std::move(headers),
                                   std::move(observe))) {}

ProbeServer::~ProbeServer() { Stop(); }

Status ProbeServer::Start() {
  if (Status s = loop_->Bind(); !s.ok()) return s;
  thread_ = std::thread([this] {
    NameThisThread("probe-server");
    loop_->Run();
  });
  return Status::Ok();
}

void ProbeServer::Stop() {
  if (!thread_.joinable()) return;
  loop_->Wake();
  thread_.join();
}

std::vector<int> ProbeServer::ports() const { return loop_->Ports(); }

ProbeServer::Counts ProbeServer::counts() const { return loop_->counts(); }

}  // namespace xpu::http
