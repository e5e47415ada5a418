// SPDX-License-Identifier: Apache-2.0
#include "sluice/config/loader.hpp"

#include "loader_detail.hpp"
#include "scalars_detail.hpp"
#include "sluice/key/cidr.hpp"

#include <algorithm>
#include <array>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <limits>
#include <sys/stat.h>
#include <unistd.h>

namespace sluice::config {
namespace {

using detail::mapping;
using detail::problems;

constexpr std::int64_t max_int = std::numeric_limits<std::int64_t>::max();
constexpr std::uint64_t max_size = std::numeric_limits<std::uint64_t>::max();
constexpr std::uint64_t one_gib = std::uint64_t{1} << 30;

/// A section of `parent` (absent reads as empty), located at its key. A section written with
/// nothing after it (`admin:`, `admin: null`, or its name alone, colon lost) is an error: it
/// would otherwise silently mean every default.
mapping section(mapping& parent, std::string_view name) {
    const auto node = parent.get(name);
    if (node.IsDefined() && node.IsNull()) {
        parent.error(name, detail::must_be("a mapping", node));
    }
    return mapping(parent.report(), node, parent.key_mark_of(name), parent.path_of(name));
}

void read_listen(mapping& m, endpoint_address& out) {
    std::string text;
    if (!m.read("listen", text, false)) {
        return;
    }
    const auto node = m.get("listen");
    auto parsed = detail::parse_listen(text, detail::echo_of(node));
    if (!parsed.value) {
        m.error("listen",
                "must be host:port, [v6]:port or :port, got " + detail::describe(node) + ": " +
                    parsed.error);
        return;
    }
    out = *parsed.value;
}

void read_trusted_proxies(mapping& m, std::vector<key::cidr>& out) {
    const auto items = m.read_list("trusted-proxies");
    for (std::size_t i = 0; i < items.size(); ++i) {
        const auto path = m.path_of("trusted-proxies") + "[" + std::to_string(i) + "]";
        const auto& item = items[i].node;
        const auto block = item.IsScalar() ? key::cidr::parse(item.Scalar()) : std::nullopt;
        if (!block) {
            m.report().add(items[i].mark,
                           path,
                           detail::must_be("an address or CIDR block such as 10.0.0.0/8", item));
            continue;
        }
        out.push_back(*block);
    }
}

void read_server(mapping& root, server_settings& out) {
    auto m = section(root, "server");
    read_listen(m, out.listen);
    read_trusted_proxies(m, out.trusted_proxies);
    m.read_int("workers", out.workers, 0, 1024);
    m.read_int("max-connections", out.max_connections, 0, 10'000'000);
    m.read_size("max-header-size", out.max_header_bytes, 1, one_gib);
    m.read_size("max-uri-length", out.max_uri_bytes, 1, one_gib);
    m.read_enum<underscore_headers>("headers-with-underscores",
                                    out.headers_with_underscores,
                                    {{"allow", underscore_headers::allow},
                                     {"drop", underscore_headers::drop},
                                     {"reject", underscore_headers::reject}});
    m.read_size("max-chunk-header-size", out.max_chunk_header_bytes, 1, one_gib);
    m.read_size("max-trailer-size", out.max_trailer_bytes, 1, one_gib);
    m.read_size("max-body-size", out.max_body_bytes, 0, max_size);
    m.read_size("request-buffer-size", out.request_buffer_bytes, 0, one_gib);
    m.read_duration("idle-timeout", out.idle_timeout, false);
    m.read_duration("header-timeout", out.header_timeout, false);
    m.read_duration("body-timeout", out.body_timeout, false);
    m.read_duration("drain-timeout", out.drain_timeout, true);
    m.finish();
}

void read_upstream(mapping& root, upstream_settings& out) {
    auto m = section(root, "upstream");
    if (!m.has("url")) {
        m.require("url", "e.g. url: http://127.0.0.1:9000");
    } else if (m.read("url", out.url, false)) {
        const auto node = m.get("url");
        auto parsed = detail::parse_upstream_url(out.url, detail::echo_of(node));
        if (parsed.value) {
            out.host = parsed.value->host;
            out.port = parsed.value->port;
        } else {
            m.error("url",
                    "must be http://host[:port], got " + detail::describe(node) + ": " +
                        parsed.error);
        }
    }
    m.read_duration("connect-timeout", out.connect_timeout, false);
    m.read_duration("timeout", out.timeout, false);
    m.read_int("max-idle-connections", out.max_idle, 0, 1'000'000);
    m.read_int("max-connections", out.max_connections, 1, 1'000'000);
    m.read_int("max-tunnels", out.max_tunnels, 0, 1'000'000);
    m.read_duration("idle-timeout", out.idle_timeout, false);
    m.read_duration("resolve-interval", out.resolve_interval, false);
    m.read_size("max-header-size", out.max_header_bytes, 1, one_gib);
    m.finish();
}

/// The longest secret file read: far above any password, far below a mistaken large file.
constexpr std::size_t max_secret_bytes = 64 * 1024;

/// The longest configuration file read: far above any configuration (a thousand rules take
/// some 200 KB), far below a log file named by mistake.
constexpr std::size_t max_config_bytes = 16 * 1024 * 1024;

/**
 * The content of the regular file at `path`, read with POSIX calls for the true errno, and no
 * more of it than `max_bytes` and one read beyond (the caller reports a larger file). Fails
 * with a message naming the file as `shown` and the OS error. O_NONBLOCK: opening a FIFO must
 * not wait for a writer (a reload would hang); only a regular file is read (not /dev/zero, not a
 * pipe).
 */
detail::parsed<std::string>
read_regular_file(const std::string& path, std::size_t max_bytes, const std::string& shown) {
    using result = detail::parsed<std::string>;
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
        return result::fail("cannot open " + shown + ": " + std::strerror(errno));
    }

    struct stat status {};

    if (::fstat(fd, &status) != 0 || !S_ISREG(status.st_mode)) {
        ::close(fd);
        return result::fail(shown + " is not a regular file");
    }
    std::string content;
    std::array<char, 4096> buffer{};
    int error = 0;
    while (content.size() <= max_bytes) {
        const auto n = ::read(fd, buffer.data(), buffer.size());
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n <= 0) {
            error = n < 0 ? errno : 0;
            break;
        }
        content.append(buffer.data(), static_cast<std::size_t>(n));
    }
    ::close(fd);
    if (error != 0) {
        return result::fail("cannot read " + shown + ": " + std::strerror(error));
    }
    return {std::move(content), {}};
}

/**
 * `password-file`: the password is the file's content without one trailing newline (as a
 * Kubernetes or Docker secret is mounted). Read again on every reload. Messages name the file
 * and the OS error, never the content.
 */
void read_password_file(mapping& m, std::string& password, std::string& path) {
    if (!m.read("password-file", path, false)) {
        return;
    }
    if (m.has("password")) {
        m.error("password-file", "and 'password' are both set: keep one");
        return;
    }
    // The path too may come from a variable.
    const auto shown = detail::describe(m.get("password-file"));
    auto content = read_regular_file(path, max_secret_bytes, shown);
    if (!content.value) {
        m.error("password-file", content.error);
        return;
    }
    auto& secret = *content.value;
    if (secret.size() > max_secret_bytes) {
        m.error("password-file",
                shown + " is larger than " + std::to_string(max_secret_bytes) + " bytes");
        return;
    }
    if (secret.ends_with("\r\n")) {
        secret.resize(secret.size() - 2);
    } else if (secret.ends_with('\n')) {
        secret.pop_back();
    }
    if (secret.empty()) {
        m.error("password-file", shown + " is empty");
        return;
    }
    password = std::move(secret);
}

// rate-limit.redis.host: a unix socket's path (from '/', at most sun_path's 107 bytes), a DNS
// name, or an IPv4 or IPv6 address (without brackets). Anything else would fail every connect
// at run time, where the failure mode applies: with `open`, a typo would lift every limit.
void check_redis_host(mapping& m, const std::string& host) {
    if (host.front() == '/') {
        if (host.size() > 107) {
            m.error("host",
                    "a unix socket's path is at most 107 bytes (" + std::to_string(host.size()) +
                        " given)");
        }
        return;
    }
    if (key::ip_address::parse(host) || detail::is_host_name(host)) {
        return;
    }
    const auto shown = detail::describe(m.get("host"));
    const auto colon = host.rfind(':');
    if (colon != std::string::npos && host.find(':') == colon &&
        host.find('/') == std::string::npos) {
        m.error("host",
                shown + " names a port: give the host alone, and the port in "
                        "rate-limit.redis.port");
        return;
    }
    m.error("host",
            shown + " is not a host name, an IP address or a unix socket's path "
                    "(no scheme: redis://... is not read)");
}

/**
 * A list of Redis nodes at `name`, each `host[:port]` (`default_port` when left out), none
 * twice. Each problem is reported at its element's line, keyed `name[i]`.
 */
std::vector<endpoint_address>
read_nodes(mapping& m, std::string_view name, std::uint16_t default_port) {
    const auto example = default_port == 6379 ? "[10.0.0.5:6379]" : "[10.0.0.7:26379]";
    if (const auto node = m.get(name);
        node.IsDefined() && (node.IsNull() || (node.IsSequence() && node.size() == 0))) {
        m.error(name, std::string("must list at least one node, e.g. ") + example);
        return {};
    }
    const auto items = m.read_list(name, "a list of host:port addresses");
    std::vector<endpoint_address> out;
    for (std::size_t i = 0; i < items.size(); ++i) {
        const auto path = m.path_of(name) + "[" + std::to_string(i) + "]";
        const auto& item = items[i].node;
        if (!item.IsScalar()) {
            m.report().add(items[i].mark, path, detail::must_be("host[:port]", item));
            continue;
        }
        const auto visibility = detail::echo_of(item);
        auto parsed = detail::parse_node_address(item.Scalar(), default_port, visibility);
        if (!parsed.value) {
            m.report().add(items[i].mark,
                           path,
                           detail::describe(item) + " is not host[:port]: " + parsed.error);
            continue;
        }
        auto address = *parsed.value;
        // Host names compare without case, as DNS does: "Redis-1" and "redis-1" are one node.
        std::transform(address.host.begin(),
                       address.host.end(),
                       address.host.begin(),
                       [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
        if (std::find(out.begin(), out.end(), address) != out.end()) {
            m.report().add(items[i].mark,
                           path,
                           (visibility == detail::echo::shown ? format_address(address)
                                                              : detail::describe(item)) +
                               " is listed twice");
            continue;
        }
        out.push_back(std::move(address));
    }
    return out;
}

void read_sentinel(mapping& redis, sentinel_settings& out) {
    auto m = section(redis, "sentinel");
    if (!m.has("master")) {
        m.require("master", "the name the Sentinels monitor, e.g. master: sluice");
    } else if (m.read("master", out.master, true) &&
               (out.master.empty() || out.master.find_first_of(" \t\r\n") != std::string::npos)) {
        m.error("master", "must not be empty or hold spaces");
    }
    if (!m.has("nodes")) {
        m.require("nodes", "e.g. nodes: [10.0.0.7:26379]");
    } else {
        out.nodes = read_nodes(m, "nodes", 26379);
    }
    m.read("password", out.password, true);
    m.finish();
}

/**
 * Exactly one of `host`, `cluster` and `sentinel` says where Redis is; none written means
 * `host`'s default. The keys that belong to one of them are refused beside another.
 */
void read_redis_topology(mapping& m, redis_settings& out) {
    struct choice {
        const char* key;
        redis_topology topology;
    };

    const std::array<choice, 3> choices{{{"host", redis_topology::single},
                                         {"cluster", redis_topology::cluster},
                                         {"sentinel", redis_topology::sentinel}}};
    const choice* chosen = nullptr;
    for (const auto& c : choices) {
        if (!m.has(c.key)) {
            continue;
        }
        if (chosen != nullptr) {
            m.error(c.key,
                    std::string("only one of host, cluster and sentinel may be set (") +
                        chosen->key + " is set at line " +
                        std::to_string(detail::line_of(m.key_mark_of(chosen->key))) + ")");
            continue;
        }
        chosen = &c;
    }
    if (chosen != nullptr) {
        out.topology = chosen->topology;
    }
    switch (out.topology) {
    case redis_topology::single:
        if (m.read("host", out.host, false)) {
            check_redis_host(m, out.host);
        }
        m.read_int("port", out.port, 1, 65535);
        break;
    case redis_topology::cluster:
        out.cluster = read_nodes(m, "cluster", 6379);
        break;
    case redis_topology::sentinel:
        read_sentinel(m, out.sentinel);
        break;
    }
    if (out.topology != redis_topology::single && m.has("port")) {
        m.error("port", "belongs to host; write each node's port in its address");
    }
    if (m.read_enum<hash_tag_mode>(
            "hash-tag", out.hash_tag, {{"none", hash_tag_mode::none}, {"ip", hash_tag_mode::ip}}) &&
        out.hash_tag == hash_tag_mode::ip && out.topology != redis_topology::cluster) {
        // `none`, the default, may be written anywhere.
        m.error("hash-tag", "ip applies only with cluster");
    }
}

void read_redis(mapping& parent, redis_settings& out) {
    auto m = section(parent, "redis");
    read_redis_topology(m, out);
    m.read("username", out.username, true);
    m.read("password", out.password, true);
    read_password_file(m, out.password, out.password_file);
    if (m.read_int("db", out.db, 0, std::numeric_limits<int>::max()) && out.db != 0 &&
        out.topology == redis_topology::cluster) {
        m.error("db", "Redis Cluster has only database 0");
    }
    m.read_duration("ttl", out.ttl, false);
    m.read_duration("timeout", out.timeout, false);
    m.read_duration("connect-timeout", out.connect_timeout, false);
    m.read_enum<failure_mode>("failure-mode",
                              out.on_failure,
                              {{"open", failure_mode::open},
                               {"closed", failure_mode::closed},
                               {"local", failure_mode::local}});
    m.finish();
}

void read_memory(mapping& parent, memory_settings& out) {
    auto m = section(parent, "memory");
    m.read_int("max-keys", out.max_keys, 1, max_int);
    m.finish();
}

void read_rate_limit(mapping& root, rate_limit_settings& out) {
    auto m = section(root, "rate-limit");
    m.read_enum<store_kind>(
        "store", out.store, {{"memory", store_kind::memory}, {"redis", store_kind::redis}});
    m.read_int("max-held", out.max_held, 1, max_int);
    m.read("x-ratelimit-headers", out.x_ratelimit_headers);
    m.read_int("ipv6-prefix", out.ipv6_prefix, 1, 128);
    // Absent, empty or `{}`: the page's example (LEAKY_BUCKET, capacity 50, flowRate 5).
    if (const auto fallback = m.get("fallback");
        fallback.IsDefined() && !fallback.IsNull() && !(fallback.IsMap() && fallback.size() == 0)) {
        out.fallback = detail::parse_limit(
            m.report(), fallback, m.key_mark_of("fallback"), m.path_of("fallback"));
    } else {
        out.fallback.line = detail::line_of(m.key_mark_of("fallback"));
    }
    read_redis(m, out.redis);
    read_memory(m, out.memory);
    out.rules = detail::parse_rules(m);
    m.finish();
}

void read_logging(mapping& root, logging_settings& out) {
    auto m = section(root, "logging");
    m.read_enum<std::string>("level",
                             out.level,
                             {{"trace", "trace"},
                              {"debug", "debug"},
                              {"info", "info"},
                              {"warn", "warn"},
                              {"error", "error"},
                              {"critical", "critical"},
                              {"off", "off"}});
    m.read_enum<logging_settings::format_kind>("format",
                                               out.format,
                                               {{"text", logging_settings::format_kind::text},
                                                {"json", logging_settings::format_kind::json}});
    m.read("access-log", out.access_log);
    m.finish();
}

void read_admin(mapping& root, admin_settings& out) {
    auto m = section(root, "admin");
    read_listen(m, out.listen);
    m.read("enabled", out.enabled);
    m.finish();
}

/**
 * Whether sockets listening at `a` and at `b` would both take one port: the same fixed port
 * (0 picks a free one each) on the same host, or on a wildcard that covers the other: `::`
 * covers both families (Linux's dual-stack default), 0.0.0.0 every IPv4 address.
 */
bool listen_addresses_clash(const endpoint_address& a, const endpoint_address& b) {
    if (a.port == 0 || a.port != b.port) {
        return false;
    }
    const auto ipv6 = [](const std::string& host) {
        return host.find(':') != std::string::npos;
    };
    const auto covers = [&](const std::string& wildcard, const std::string& other) {
        return wildcard == "::" || (wildcard == "0.0.0.0" && !ipv6(other));
    };
    return a.host == b.host || covers(a.host, b.host) || covers(b.host, a.host);
}

void check_ports(const config& cfg, mapping& root) {
    const auto& a = cfg.server.listen;
    const auto& b = cfg.admin.listen;
    if (!cfg.admin.enabled || !listen_addresses_clash(a, b)) {
        return;
    }
    const auto both = format_address(a) + " and " + format_address(b);
    if (auto admin = section(root, "admin"); admin.has("listen")) {
        admin.error("listen", "must differ from server.listen (" + both + " take one port)");
        return;
    }
    // admin.listen is its default: point at what the operator wrote.
    auto server = section(root, "server");
    server.error("listen",
                 "must differ from admin.listen, whose default is " + format_address(b) + " (" +
                     both + " take one port): set admin.listen, or admin.enabled: false");
}

/// The request header a limit reads by name whose name has an underscore, if any: a key part
/// (`header:NAME`) or `cost.request: header:NAME`.
std::optional<std::string> underscored_header_read(const limit& l) {
    const auto underscored = [](const std::string& name) {
        return name.find('_') != std::string::npos;
    };
    for (const auto& part : l.key) {
        if (part.what == key_part::kind::header && underscored(part.header)) {
            return part.header;
        }
    }
    if (l.cost && l.cost->request.what == cost_source::kind::header &&
        underscored(l.cost->request.header)) {
        return l.cost->request.header;
    }
    return std::nullopt;
}

/// A limit that reads a header `server.headers-with-underscores` takes out (or refuses) would
/// never see it: every request would share one bucket, or reserve the fallback cost.
void check_underscored_headers(const config& cfg, mapping& root) {
    const auto policy = cfg.server.headers_with_underscores;
    if (policy == underscore_headers::allow) {
        return;
    }
    const auto check = [&](const limit& l, const std::string& path) {
        const auto name = underscored_header_read(l);
        if (!name) {
            return;
        }
        YAML::Mark at;
        at.line = l.line > 0 ? l.line - 1 : 0;
        root.report().add(at,
                          path,
                          "reads header " + detail::quoted(*name) +
                              ", whose name has '_': server.headers-with-underscores is " +
                              (policy == underscore_headers::drop
                                   ? "drop, which takes such a header out"
                                   : "reject, which refuses such a request") +
                              " before any limit reads it; name the header with '-', or set "
                              "server.headers-with-underscores: allow");
    };
    const auto& rl = cfg.rate_limit;
    check(rl.fallback, "rate-limit.fallback");
    for (std::size_t i = 0; i < rl.rules.size(); ++i) {
        for (std::size_t j = 0; j < rl.rules[i].limits.size(); ++j) {
            check(rl.rules[i].limits[j],
                  "rate-limit.rules[" + std::to_string(i) + "].limits[" + std::to_string(j) + "]");
        }
    }
}

/// What stands at a second document's start, for the message refusing it.
std::string second_document_problem(std::string_view yaml, const YAML::Mark& at) {
    const auto pos = at.pos >= 0 ? static_cast<std::size_t>(at.pos) : yaml.size();
    const auto rest = pos < yaml.size() ? yaml.substr(pos) : std::string_view();
    if (rest.starts_with("---")) {
        return "only one YAML document is allowed ('---')";
    }
    const auto c = rest.empty() ? '?' : rest.front();
    const bool printable = c > ' ' && c < 0x7f;
    std::string what = "YAML syntax error: unexpected ";
    what += printable ? detail::quoted(std::string_view(&c, 1)) : std::string("text");
    what += " (only one YAML document is allowed)";
    return what;
}

/// YAML text to a document; a syntax error is recorded and yields nothing.
std::optional<YAML::Node> parse_yaml(std::string_view yaml, problems& report) {
    try {
        // Only the first document would be read: the rest would be silently ignored.
        if (const auto second = detail::second_document(yaml)) {
            report.add_plain(*second, second_document_problem(yaml, *second));
            return std::nullopt;
        }
        return YAML::Load(std::string(yaml));
    } catch (const YAML::Exception& e) {
        report.add_plain(e.mark, "YAML syntax error: " + e.msg);
        return std::nullopt;
    }
}

} // namespace

config load_string(std::string_view yaml, const std::string& source, const environment& env) {
    problems report(source, yaml);
    config cfg;
    cfg.source = source;
    const auto document = parse_yaml(yaml, report);
    if (document && detail::check_text(report, yaml, *document, env)) {
        mapping root(report, *document, YAML::Mark(), "");
        read_server(root, cfg.server);
        read_upstream(root, cfg.upstream);
        read_rate_limit(root, cfg.rate_limit);
        read_logging(root, cfg.logging);
        read_admin(root, cfg.admin);
        root.finish();
        check_ports(cfg, root);
        check_underscored_headers(cfg, root);
    }
    if (!report.empty()) {
        throw config_error(report.joined());
    }
    cfg.key_lines = report.take_key_lines();
    detail::add_warnings(cfg);
    return cfg;
}

std::string located_key(const config& cfg, std::string_view key) {
    if (cfg.key_lines.empty()) {
        return std::string(key);
    }
    const auto it = cfg.key_lines.find(key);
    if (it == cfg.key_lines.end()) {
        return std::string(key) + " (not in " + cfg.source + ")";
    }
    return std::string(key) + " (" + cfg.source + ":" + std::to_string(it->second) + ")";
}

config load_file(const std::string& path, const environment& env) {
    // A directory opens and reads as an empty file, which would be reported as a file missing
    // every required key (a Kubernetes ConfigMap's mount named instead of the file in it).
    struct stat status {};

    if (::stat(path.c_str(), &status) == 0 && S_ISDIR(status.st_mode)) {
        throw config_error(path + ": is a directory: name the configuration file in it");
    }
    auto text = read_regular_file(path, max_config_bytes, detail::quoted(path));
    if (!text.value) {
        throw config_error(path + ": " + text.error);
    }
    if (text.value->size() > max_config_bytes) {
        throw config_error(path + ": larger than 16 MiB: is it the configuration file?");
    }
    return load_string(*text.value, path, env);
}

} // namespace sluice::config
