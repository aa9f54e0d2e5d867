#pragma once

namespace xpu {

// One part of the exporter that runs threads of its own and that a reload
// may rebuild, switch on or switch off: a HAL backend's sampler, the
// kubelet's pod mapper, the API server's pod watch, the Node reporter. The
// exporter holds its parts in one table (app/parts.cc) and starts, stops and
// replaces them in a loop over it; a part names none of the others.
//
// A reload that rebuilds a part stops the old one, lets the new one take
// over what the old one knew (TakeOver), then starts the new one; a reload
// that switches a part off stops it and calls Withdraw. Start, Stop,
// TakeOver and Withdraw are called by the exporter's owning thread (Start,
// Stop) or its reload thread, one at a time; each part says which other
// threads may call the rest of its interface.
class Part {
 public:
  virtual ~Part() = default;
  virtual void Start() = 0;
  // Joins the part's threads; idempotent.
  virtual void Stop() = 0;
  // Called on a new part before its Start, with the stopped part it
  // replaces (the same kind: the same row of the table). What stays true
  // across a reload (active faults, the kernel log's read position, the
  // Node's state) goes on from there instead of being raised or read again.
  virtual void TakeOver(Part& /*old*/) {}
  // Called on a stopped part that a reload switched off (none replaces it):
  // takes back what it published, so that nothing it saw stays behind as if
  // it were still seen.
  virtual void Withdraw() {}
  // The part doing the work: itself, or the one it runs once it has found
  // its source (NvmlLookout's sampler). Any thread that holds the part.
  virtual Part* Working() { return this; }
};

}  // namespace xpu
