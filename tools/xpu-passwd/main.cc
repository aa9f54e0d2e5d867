// xpu-passwd: prints a bcrypt hash for basic_auth_users in --web.config.file.
//   xpu-passwd [--cost N] < password     (reads one line from stdin)
#include <crypt.h>

#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>

int main(int argc, char** argv) {
  unsigned long cost = 10;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--cost") && i + 1 < argc) {
      cost = std::strtoul(argv[++i], nullptr, 10);
    } else {
      std::cerr << "usage: xpu-passwd [--cost 4..31] < password\n";
      return 2;
    }
  }
  if (cost < 4 || cost > 31) {
    std::cerr << "xpu-passwd: --cost must be 4..31\n";
    return 2;
  }
  std::string password;
  if (!std::getline(std::cin, password) || password.empty()) {
    std::cerr << "xpu-passwd: no password on standard input\n";
    return 2;
  }
  char salt[CRYPT_GENSALT_OUTPUT_SIZE];
  if (crypt_gensalt_rn("$2y$", cost, nullptr, 0, salt, sizeof salt) == nullptr) {
    std::cerr << "xpu-passwd: cannot make a bcrypt salt\n";
    return 1;
  }
  crypt_data data{};
  const char* hash = crypt_r(password.c_str(), salt, &data);
  if (hash == nullptr || hash[0] == '*') {
    std::cerr << "xpu-passwd: bcrypt failed\n";
    return 1;
  }
  std::cout << hash << "\n";
  return 0;
}
