// SPDX-License-Identifier: Apache-2.0
#include "support/redis_server.hpp"

#include <algorithm>
#include <arpa/inet.h>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <netinet/in.h>
#include <poll.h>
#include <sstream>
#include <stdexcept>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>
#include <vector>

namespace sluice::test {
namespace {

using namespace std::chrono_literals;
using steady = std::chrono::steady_clock;

// One attempt: connect, send PING, wait briefly for any reply ("+PONG" or "-NOAUTH ...").
bool answers_ping(std::uint16_t port) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        return false;
    }
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    address.sin_port = htons(port);
    bool ok = false;
    // The sockaddr cast is how the BSD socket API is spelled.
    if (::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0) {
        static constexpr char ping[] = "PING\r\n";
        if (::send(fd, ping, sizeof ping - 1, MSG_NOSIGNAL) == sizeof ping - 1) {
            pollfd p{fd, POLLIN, 0};
            char first = 0;
            ok = ::poll(&p, 1, 200) == 1 && ::recv(fd, &first, 1, 0) == 1 &&
                 (first == '+' || first == '-');
        }
    }
    ::close(fd);
    return ok;
}

/**
 * Whether process `pid` holds a socket listening on TCP port `port` (IPv4). free_port() only
 * found the port free: another test's server may take it before ours binds, and would then
 * answer our PING. Read from /proc/net/tcp (each socket's "hex-address:hex-port", its state, 0A
 * for LISTEN, and its inode) and the links of /proc/<pid>/fd ("socket:[inode]").
 */
bool listens_on(pid_t pid, std::uint16_t port) {
    std::ifstream table("/proc/net/tcp");
    std::string line;
    std::getline(table, line); // the column titles
    std::vector<std::string> sockets;
    while (std::getline(table, line)) {
        std::istringstream fields(line);
        std::string slot, local, remote, state, queues, timer, retransmits, uid, timeout, inode;
        fields >> slot >> local >> remote >> state >> queues >> timer >> retransmits >> uid >>
            timeout >> inode;
        const auto colon = local.find(':');
        if (state == "0A" && colon != std::string::npos &&
            std::stoul(local.substr(colon + 1), nullptr, 16) == port) {
            sockets.push_back("socket:[" + inode + "]");
        }
    }
    std::error_code ec;
    for (const auto& fd :
         std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/fd", ec)) {
        const auto target = std::filesystem::read_symlink(fd.path(), ec);
        if (!ec && std::find(sockets.begin(), sockets.end(), target.string()) != sockets.end()) {
            return true;
        }
    }
    return false;
}

// The state letter of /proc/<pid>/stat: 'R', 'S', 'T' (stopped), ...
char process_state(pid_t pid) {
    std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
    std::string line;
    std::getline(in, line);
    // "pid (comm) S ...": comm may hold spaces, so look after the last ')'.
    const auto close = line.rfind(')');
    return close != std::string::npos && close + 2 < line.size() ? line[close + 2] : '?';
}

} // namespace

std::int64_t info_count(std::string_view info, std::string_view field) {
    const auto at = info.find(field);
    return at == std::string_view::npos
               ? 0
               : std::stoll(std::string(info.substr(at + field.size(), 20)));
}

std::int64_t script_calls_in(std::string_view commandstats) {
    return info_count(commandstats, "cmdstat_fcall:calls=") +
           info_count(commandstats, "cmdstat_evalsha:calls=") +
           info_count(commandstats, "cmdstat_eval:calls=");
}

std::string find_on_path(const std::string& name) {
    const char* path = std::getenv("PATH");
    const std::string dirs = path != nullptr ? path : "/usr/local/bin:/usr/bin:/bin";
    std::size_t begin = 0;
    while (begin <= dirs.size()) {
        const std::size_t end = std::min(dirs.find(':', begin), dirs.size());
        const auto candidate = std::filesystem::path(dirs.substr(begin, end - begin)) / name;
        if (::access(candidate.c_str(), X_OK) == 0) {
            return candidate.string();
        }
        begin = end + 1;
    }
    return {};
}

bool redis_server::available() {
    return !find_on_path("redis-server").empty();
}

redis_server::redis_server(options opts)
    : opts_(std::move(opts)) {
    // As sluice's main does: a hiredis client writing to a server the test just stopped would
    // otherwise kill the test binary with SIGPIPE.
    std::signal(SIGPIPE, SIG_IGN);
    if (opts_.unix_socket) {
        unix_socket_ = dir_.file("redis.sock");
    }
    // A port found free may be taken before redis binds it: try a few.
    for (int attempt = 0; attempt < 5; ++attempt) {
        port_ = free_port();
        cluster_port_ = opts_.cluster_enabled ? free_port() : 0;
        start(10s);
        if (running()) {
            return;
        }
    }
    throw std::runtime_error("redis-server did not start; see " + dir_.file("redis.log"));
}

redis_server::~redis_server() {
    stop();
}

config::redis_settings redis_server::settings() const {
    config::redis_settings s;
    s.host = host_;
    s.port = port_;
    s.password = opts_.requirepass;
    return s;
}

void redis_server::start(std::chrono::milliseconds limit) {
    const std::string binary = find_on_path("redis-server");
    if (binary.empty()) {
        throw std::runtime_error("redis-server not found on PATH");
    }
    std::vector<std::string> args{binary};
    if (!opts_.sentinel_config.empty()) {
        // The config file comes first; Sentinel needs it writable, and keeps what it learnt
        // there across a restart.
        const auto conf = dir_.file("sentinel.conf");
        if (!std::filesystem::exists(conf)) {
            std::ofstream out(conf);
            for (const auto& line : opts_.sentinel_config) {
                out << line << '\n';
            }
        }
        args.insert(args.end(), {conf, "--sentinel"});
    }
    args.insert(args.end(),
                {"--port",
                 std::to_string(port_),
                 "--bind",
                 host_,
                 "--save",
                 "",
                 "--appendonly",
                 "no",
                 "--dir",
                 dir_.path().string(),
                 "--logfile",
                 dir_.file("redis.log"),
                 "--daemonize",
                 "no"});
    if (!opts_.requirepass.empty()) {
        args.insert(args.end(), {"--requirepass", opts_.requirepass});
    }
    if (!unix_socket_.empty()) {
        args.insert(args.end(), {"--unixsocket", unix_socket_, "--unixsocketperm", "700"});
    }
    if (opts_.cluster_enabled) {
        args.insert(args.end(),
                    {"--cluster-enabled",
                     "yes",
                     "--cluster-config-file",
                     dir_.file("nodes.conf"),
                     "--cluster-port",
                     std::to_string(cluster_port_)});
    }
    args.insert(args.end(), opts_.extra_args.begin(), opts_.extra_args.end());
    std::vector<char*> argv;
    for (auto& a : args) {
        argv.push_back(a.data());
    }
    argv.push_back(nullptr);

    const pid_t pid = ::fork();
    if (pid < 0) {
        throw std::runtime_error("fork failed: " + std::string(std::strerror(errno)));
    }
    if (pid == 0) {
        // The child: die with the test process, however it ends.
        ::prctl(PR_SET_PDEATHSIG, SIGKILL);
        ::execv(argv[0], argv.data());
        ::_exit(127);
    }
    pid_ = pid;
    paused_ = false;
    if (!wait_ready(limit)) {
        stop();
    }
}

bool redis_server::wait_ready(std::chrono::milliseconds limit) {
    const auto deadline = steady::now() + limit;
    while (steady::now() < deadline) {
        int status = 0;
        if (::waitpid(pid_, &status, WNOHANG) == pid_) {
            pid_ = -1; // exited: the port was taken, most likely
            return false;
        }
        // Ours, not another test's server that took the port first (ours then exits, above).
        if (answers_ping(port_) && listens_on(pid_, port_)) {
            return true;
        }
        // Polling a condition with a deadline: the server has no way to tell us it is up.
        std::this_thread::sleep_for(10ms);
    }
    return false;
}

void redis_server::stop() {
    if (pid_ <= 0) {
        return;
    }
    ::kill(pid_, SIGKILL);
    int status = 0;
    while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
    pid_ = -1;
    paused_ = false;
}

void redis_server::restart() {
    stop();
    start(10s);
    if (!running()) {
        throw std::runtime_error("redis-server did not restart on port " + std::to_string(port_));
    }
}

void redis_server::pause() {
    if (pid_ <= 0 || paused_) {
        return;
    }
    ::kill(pid_, SIGSTOP);
    paused_ = true;
    // SIGSTOP takes effect asynchronously: wait until the kernel reports the process stopped,
    // so that no command sent after pause() is answered.
    const auto deadline = steady::now() + 5s;
    while (steady::now() < deadline && process_state(pid_) != 'T') {
        std::this_thread::sleep_for(1ms);
    }
}

void redis_server::resume() {
    if (pid_ > 0 && paused_) {
        ::kill(pid_, SIGCONT);
        paused_ = false;
    }
}

} // namespace sluice::test
