#pragma once

#include <string>

namespace xpu {

// The canonical spelling of a hardware fault code: "0x80e18400", "80E18400"
// -> "0x80E18400" ("0x" + 8 upper-case hex digits). Empty if `code` is not 1..8
// hex digits. Shared by the HAL reader and xdm-sim's writer so both agree.
std::string NormalizeFaultCode(const std::string& code);

}  // namespace xpu
