// Socket addresses and interface selection.
//
// MCCL_SOCKET_IFNAME follows NCCL's syntax: a comma-separated list of
// interface-name prefixes ("eth,en"); a leading '^' excludes the listed
// interfaces ("^docker,lo"); a leading '=' (after any '^') makes the names
// exact ("=eth0", "^=eth1"). Without it, MCCL uses the interface whose address
// the kernel would use to reach the master (rendezvous) host.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>

#include <string>
#include <vector>

namespace mccl {

struct SockAddr {
  sockaddr_storage storage{};
  socklen_t len = 0;

  // Parses "1.2.3.4:5", "[fe80::1%eth0]:5" or "host:5" (resolved).
  static SockAddr parse(const std::string& hostPort);
  // Resolves a host name or numeric address with port 0.
  static SockAddr resolveHost(const std::string& host);
  const sockaddr* sa() const { return reinterpret_cast<const sockaddr*>(&storage); }
  sockaddr* sa() { return reinterpret_cast<sockaddr*>(&storage); }
  int family() const { return storage.ss_family; }
  int port() const;
  void setPort(int port);
  std::string host() const;      // numeric address without port
  std::string toString() const;  // "1.2.3.4:5" or "[::1]:5"
  bool sameHost(const SockAddr& other) const;
};

struct Interface {
  std::string name;
  SockAddr addr;  // port 0
  bool loopback = false;
};

// Interfaces that are up and have an IPv4 or IPv6 address (IPv6 link-local
// addresses are skipped), in the kernel's order, IPv4 first per name.
std::vector<Interface> listInterfaces();

// Whether `name` is selected by an MCCL_SOCKET_IFNAME-style spec.
bool ifnameMatches(const std::string& spec, const std::string& name);

// The interface MCCL should listen on. `spec` is MCCL_SOCKET_IFNAME (may be
// empty); `routeHost` is the master address (may be empty). Throws a usage
// error listing the available interfaces when nothing matches.
Interface selectInterface(const std::string& spec, const std::string& routeHost);

}  // namespace mccl
