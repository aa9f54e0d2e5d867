#pragma once

#include <string_view>

namespace xpu {

// Whether the JSON `text` nests no deeper than `max_depth` arrays and
// objects (strings skipped, their escapes honoured; the text need not be
// valid). Linear, allocates nothing: checked before a parse, it bounds what
// the depth costs after it. nlohmann's parser is iterative, but its dump()
// recurses (a 2 MB "[[[[..." once overflowed the stack), and a parse
// callback that rebuilds the path at every key costs the depth at each one
// (a 16 MiB "{"a":{"a":..." took hours). Pure: any thread.
bool JsonNestingWithin(std::string_view text, int max_depth);

}  // namespace xpu
