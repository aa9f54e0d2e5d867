#include "common/fault_code.h"

#include <cctype>

namespace xpu {

std::string NormalizeFaultCode(const std::string& code) {
  std::string hex = code;
  if (hex.size() > 2 && hex[0] == '0' && (hex[1] == 'x' || hex[1] == 'X')) hex = hex.substr(2);
  if (hex.empty() || hex.size() > 8) return "";
  for (char& c : hex) {
    if (!std::isxdigit(static_cast<unsigned char>(c))) return "";
    c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  }
  return "0x" + std::string(8 - hex.size(), '0') + hex;
}

}  // namespace xpu
