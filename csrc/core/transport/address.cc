#include "transport/address.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <unistd.h>

#include <cstring>

#include "util/check.h"
#include "util/logging.h"

namespace mccl {
namespace {

std::vector<std::string> splitComma(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    size_t end = s.find(',', start);
    if (end == std::string::npos) end = s.size();
    std::string item = s.substr(start, end - start);
    // NCCL allows "eth0:port"; the port part is not used for selection.
    size_t colon = item.find(':');
    if (colon != std::string::npos) item = item.substr(0, colon);
    if (!item.empty()) out.push_back(item);
    start = end + 1;
  }
  return out;
}

SockAddr fromAddrinfo(const addrinfo* ai) {
  SockAddr a;
  std::memcpy(&a.storage, ai->ai_addr, ai->ai_addrlen);
  a.len = ai->ai_addrlen;
  return a;
}

}  // namespace

SockAddr SockAddr::resolveHost(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  int rc = ::getaddrinfo(host.c_str(), nullptr, &hints, &res);
  MCCL_USAGE_CHECK(rc == 0 && res != nullptr, "cannot resolve host '", host,
                   "': ", gai_strerror(rc));
  // Prefer IPv4 when a name has both, matching what TCPStore connects to.
  const addrinfo* pick = res;
  for (const addrinfo* ai = res; ai != nullptr; ai = ai->ai_next) {
    if (ai->ai_family == AF_INET) {
      pick = ai;
      break;
    }
  }
  SockAddr a = fromAddrinfo(pick);
  ::freeaddrinfo(res);
  return a;
}

SockAddr SockAddr::parse(const std::string& hostPort) {
  std::string host, port;
  if (!hostPort.empty() && hostPort[0] == '[') {
    size_t close = hostPort.find(']');
    MCCL_USAGE_CHECK(close != std::string::npos && close + 1 < hostPort.size() &&
                         hostPort[close + 1] == ':',
                     "bad address '", hostPort, "' (expected [ipv6]:port)");
    host = hostPort.substr(1, close - 1);
    port = hostPort.substr(close + 2);
  } else {
    size_t colon = hostPort.rfind(':');
    MCCL_USAGE_CHECK(colon != std::string::npos, "bad address '", hostPort,
                     "' (expected host:port)");
    host = hostPort.substr(0, colon);
    port = hostPort.substr(colon + 1);
  }
  int p = -1;
  try {
    p = std::stoi(port);
  } catch (const std::exception&) {
  }
  MCCL_USAGE_CHECK(p >= 0 && p <= 65535, "bad port in address '", hostPort, "'");
  SockAddr a = resolveHost(host);
  a.setPort(p);
  return a;
}

int SockAddr::port() const {
  if (family() == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in*>(&storage)->sin_port);
  if (family() == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6*>(&storage)->sin6_port);
  return 0;
}

void SockAddr::setPort(int port) {
  if (family() == AF_INET) reinterpret_cast<sockaddr_in*>(&storage)->sin_port = htons(port);
  if (family() == AF_INET6) reinterpret_cast<sockaddr_in6*>(&storage)->sin6_port = htons(port);
}

std::string SockAddr::host() const {
  char buf[INET6_ADDRSTRLEN + IF_NAMESIZE + 2] = {0};
  if (family() == AF_INET) {
    ::inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(&storage)->sin_addr, buf, sizeof(buf));
  } else if (family() == AF_INET6) {
    ::inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(&storage)->sin6_addr, buf,
                sizeof(buf));
  } else {
    return "<no address>";
  }
  return buf;
}

std::string SockAddr::toString() const {
  if (family() == AF_INET6) return strCat("[", host(), "]:", port());
  return strCat(host(), ":", port());
}

bool SockAddr::sameHost(const SockAddr& o) const {
  if (family() != o.family()) return false;
  if (family() == AF_INET) {
    return reinterpret_cast<const sockaddr_in*>(&storage)->sin_addr.s_addr ==
           reinterpret_cast<const sockaddr_in*>(&o.storage)->sin_addr.s_addr;
  }
  if (family() == AF_INET6) {
    return std::memcmp(&reinterpret_cast<const sockaddr_in6*>(&storage)->sin6_addr,
                       &reinterpret_cast<const sockaddr_in6*>(&o.storage)->sin6_addr,
                       sizeof(in6_addr)) == 0;
  }
  return false;
}

std::vector<Interface> listInterfaces() {
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) {
    throwError(ErrorKind::kSystem, "getifaddrs failed: ", errnoString(errno));
  }
  std::vector<Interface> v4, v6;
  for (ifaddrs* it = list; it != nullptr; it = it->ifa_next) {
    if (it->ifa_addr == nullptr || (it->ifa_flags & IFF_UP) == 0) continue;
    int fam = it->ifa_addr->sa_family;
    if (fam != AF_INET && fam != AF_INET6) continue;
    Interface itf;
    itf.name = it->ifa_name;
    itf.loopback = (it->ifa_flags & IFF_LOOPBACK) != 0;
    size_t len = fam == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
    std::memcpy(&itf.addr.storage, it->ifa_addr, len);
    itf.addr.len = static_cast<socklen_t>(len);
    if (fam == AF_INET6) {
      auto* a6 = reinterpret_cast<const sockaddr_in6*>(it->ifa_addr);
      if (IN6_IS_ADDR_LINKLOCAL(&a6->sin6_addr)) continue;  // needs a scope id to be usable
      v6.push_back(itf);
    } else {
      v4.push_back(itf);
    }
  }
  ::freeifaddrs(list);
  v4.insert(v4.end(), v6.begin(), v6.end());
  return v4;
}

bool ifnameMatches(const std::string& spec, const std::string& name) {
  std::string s = spec;
  bool exclude = false, exact = false;
  if (!s.empty() && s[0] == '^') {
    exclude = true;
    s = s.substr(1);
  }
  if (!s.empty() && s[0] == '=') {
    exact = true;
    s = s.substr(1);
  }
  bool hit = false;
  for (const std::string& item : splitComma(s)) {
    if (exact ? name == item : name.compare(0, item.size(), item) == 0) {
      hit = true;
      break;
    }
  }
  return exclude ? !hit : hit;
}

namespace {

// The local address the kernel would use to reach `host`: connect() a UDP
// socket (no packet is sent) and read its local name.
bool routeSource(const std::string& host, SockAddr* out) {
  SockAddr target;
  try {
    target = SockAddr::resolveHost(host);
  } catch (const Error&) {
    return false;
  }
  target.setPort(9);  // any port; UDP connect sends nothing
  int fd = ::socket(target.family(), SOCK_DGRAM, 0);
  if (fd < 0) return false;
  bool ok = ::connect(fd, target.sa(), target.len) == 0;
  if (ok) {
    out->len = sizeof(out->storage);
    ok = ::getsockname(fd, out->sa(), &out->len) == 0;
  }
  ::close(fd);
  return ok;
}

std::string describe(const std::vector<Interface>& all) {
  std::string s;
  for (const auto& i : all) s += strCat(s.empty() ? "" : ", ", i.name, "=", i.addr.host());
  return s.empty() ? "none" : s;
}

}  // namespace

Interface selectInterface(const std::string& spec, const std::string& routeHost) {
  std::vector<Interface> all = listInterfaces();
  if (!spec.empty()) {
    for (const auto& itf : all) {
      if (ifnameMatches(spec, itf.name)) return itf;
    }
    throwError(ErrorKind::kUsage, "MCCL_SOCKET_IFNAME=", spec,
               " matches no interface that is up; available: ", describe(all));
  }
  SockAddr src;
  if (!routeHost.empty() && routeSource(routeHost, &src)) {
    for (const auto& itf : all) {
      if (itf.addr.sameHost(src)) return itf;
    }
    MCCL_LOG(kInfo, "the route to ", routeHost, " uses ", src.host(),
             ", which no listed interface holds; falling back");
  }
  // No hint: the first interface that is not loopback or a container bridge,
  // else loopback (a single-machine job).
  for (const auto& itf : all) {
    if (!itf.loopback && !ifnameMatches("docker,veth,virbr", itf.name)) return itf;
  }
  for (const auto& itf : all) {
    if (itf.loopback) return itf;
  }
  throwError(ErrorKind::kSystem, "no usable network interface; available: ", describe(all));
}

}  // namespace mccl
