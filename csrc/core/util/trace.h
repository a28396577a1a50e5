// Event trace for latency diagnosis, on when MCCL_TRACE_DIR names a
// directory: each process keeps timestamped events in memory (at most
// kTraceCapacity, 40 bytes each; later ones are counted as dropped) and writes them to
// DIR/mccl-trace-<pid>.txt when it exits normally. Off, record() is one
// test of a constant.
//
// Events (`who` is this rank for the op and call events, the peer for the
// round and frame events):
//   op_start, op_end     a collective's algorithm begins and ends (any algorithm;
//                        op_start's slot is its op kind << 8 | algorithm,
//                        op_end's is 1 when it failed)
//   round_posted         recursive doubling posted round `slot`'s receive
//   round_sent           ... and returned from posting its send (written inline
//                        when the socket was idle)
//   round_resumed        ... and resumed with the partner's data in place
//   frame_read           a connection's receive thread is about to read a
//                        collective's DATA payload or REF descriptor for this group
//                        (`who` is the sender's rank in the group)
//   work_done            the torch Work of an op was marked complete
//   wait_returned        Work.wait() returned to its caller
//   call_entered         a torch ProcessGroup call entered MCCL
//   submitted            the op was handed to its group's engine
// `mccl-bench trace-report DIR` reads the files of all ranks of one host (the
// timestamps are CLOCK_MONOTONIC, comparable only on one machine).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace mccl::trace {

enum class Ev : uint8_t {
  kOpStart,
  kOpEnd,
  kRoundPosted,
  kRoundSent,
  kRoundResumed,
  kFrameRead,
  kWorkDone,
  kWaitReturned,
  kCallEntered,
  kSubmitted,
};
constexpr size_t kTraceCapacity = 1 << 20;

// Whether MCCL_TRACE_DIR was set (non-empty) when the library was loaded.
extern const bool gOn;
void recordSlow(Ev e, int who, uint64_t group, uint64_t seq, uint32_t slot);
inline void record(Ev e, int who, uint64_t group, uint64_t seq, uint32_t slot) {
  if (gOn) recordSlow(e, who, group, seq, slot);
}
// Throws a usage error unless `dir` is empty or a directory this process
// can write to (checked when a group is made).
void checkDir(const std::string& dir);
// The name written for `e` ("op_start", ...).
const char* name(Ev e);

}  // namespace mccl::trace
