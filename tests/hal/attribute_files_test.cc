#include "hal/attribute_files.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "support/test_util.h"

namespace xpu::hal {
namespace {

namespace fs = std::filesystem;

// As a test or an editor writes: the same file, truncated and written.
void WriteInPlace(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::trunc) << text;
}
// As xdm-sim writes: a new file renamed over the old one.
void WriteByRename(const std::string& path, const std::string& text) {
  std::ofstream(path + ".tmp", std::ios::trunc) << text;
  fs::rename(path + ".tmp", path);
}

std::string Read(HeldFiles& held, const std::string& dir, const char* name) {
  std::string out;
  Status s = held.Read(dir, name, &out);
  return s.ok() ? out : "error: " + s.message();
}

TEST(HeldFilesTest, AHeldFileReadsWhatAFreshOpenWould) {
  xpu::testing::TempDir t;
  const std::string dir = t.File("card");
  fs::create_directory(dir);
  WriteInPlace(dir + "/health", "1\n");
  HeldFiles held;
  ASSERT_TRUE(held.holding()) << "inotify is available here";
  EXPECT_EQ(Read(held, dir, "health"), "1\n");
  EXPECT_EQ(held.held(), 1u);
  // Written in place: the same file, read again from its start.
  WriteInPlace(dir + "/health", "0\n");
  EXPECT_EQ(Read(held, dir, "health"), "0\n");
  WriteInPlace(dir + "/health", "");
  EXPECT_EQ(Read(held, dir, "health"), "");
  // Longer than one read.
  const std::string big(10000, 'x');
  WriteInPlace(dir + "/health", big);
  EXPECT_EQ(Read(held, dir, "health"), big);
  EXPECT_EQ(held.held(), 1u);

  // Replaced by a rename: the next round reads the new file.
  WriteByRename(dir + "/health", "1\n");
  held.Check();
  EXPECT_EQ(Read(held, dir, "health"), "1\n");
  // Deleted: absent, as to a fresh open.
  fs::remove(dir + "/health");
  held.Check();
  std::string out;
  EXPECT_EQ(held.Read(dir, "health", &out).code(), Status::Code::kNotFound);
  EXPECT_EQ(held.held(), 0u);
  // Back again.
  WriteInPlace(dir + "/health", "1\n");
  held.Check();
  EXPECT_EQ(Read(held, dir, "health"), "1\n");
}

// A card's directory made anew (a hot swap): the directory said so, or its
// entry in the parent's listing is another inode now.
TEST(HeldFilesTest, ADirectoryMadeAnewIsReadAnew) {
  xpu::testing::TempDir t;
  const std::string dir = t.File("card");
  fs::create_directory(dir);
  WriteInPlace(dir + "/device", "0x2335\n");
  HeldFiles held;
  EXPECT_EQ(Read(held, dir, "device"), "0x2335\n");
  fs::remove_all(dir);
  fs::create_directory(dir);
  WriteInPlace(dir + "/device", "0x2330\n");
  held.Check();
  EXPECT_EQ(Read(held, dir, "device"), "0x2330\n");

  // Swapped by a rename of the whole directory over a fresh one: the held
  // directory moved away (said), and the listing's inode differs (Seen).
  const std::string fresh = t.File("fresh");
  fs::create_directory(fresh);
  WriteInPlace(fresh + "/device", "0x1111\n");
  struct stat st {};
  ASSERT_EQ(::stat(fresh.c_str(), &st), 0);
  fs::rename(dir, t.File("old"));
  fs::rename(fresh, dir);
  held.Seen(dir, st.st_ino);
  EXPECT_EQ(Read(held, dir, "device"), "0x1111\n");

  // The same inode Seen again keeps what is held.
  const size_t before = held.held();
  held.Seen(dir, st.st_ino);
  EXPECT_EQ(held.held(), before);
  // Another inode lets go at once, whatever inotify said.
  held.Seen(dir, st.st_ino + 1);
  EXPECT_EQ(held.held(), 0u);
}

// A directory a round did not list or read is let go by the round after:
// what a card that left the bus held is not kept open.
TEST(HeldFilesTest, SweepLetsGoOfDirectoriesNoRoundTouched) {
  xpu::testing::TempDir t;
  HeldFiles held;
  for (const char* card : {"a", "b"}) {
    fs::create_directory(t.File(card));
    WriteInPlace(t.File(card) + "/class", "0x030200\n");
    EXPECT_EQ(Read(held, t.File(card), "class"), "0x030200\n");
  }
  held.Sweep();  // both read this round
  EXPECT_EQ(held.held(), 2u);
  EXPECT_EQ(Read(held, t.File("a"), "class"), "0x030200\n");
  held.Sweep();  // b was not
  EXPECT_EQ(held.held(), 1u);
  held.Forget(t.File("a"));
  EXPECT_EQ(held.held(), 0u);
}

// Bounds: at most max_files held (the rest read and closed); a file held
// longer than max_age is opened anew, even where no notice came.
TEST(HeldFilesTest, HoldsAtMostItsBoundAndNoLongerThanItsAge) {
  xpu::testing::TempDir t;
  HeldFiles held({/*max_files=*/2, /*max_age=*/std::chrono::hours(1)});
  for (const char* f : {"a", "b", "c"}) {
    WriteInPlace(t.File(f), f);
    EXPECT_EQ(Read(held, t.path(), f), f);
  }
  EXPECT_EQ(held.held(), 2u);
  // With no notice read (no Check), a held file replaced reads as it was
  // until the next round; one past its age is opened anew at once.
  HeldFiles young({2, std::chrono::hours(1)}), old({2, std::chrono::milliseconds(0)});
  EXPECT_EQ(Read(young, t.path(), "a"), "a");
  EXPECT_EQ(Read(old, t.path(), "a"), "a");
  WriteByRename(t.File("a"), "A");
  EXPECT_EQ(Read(young, t.path(), "a"), "a");
  EXPECT_EQ(Read(old, t.path(), "a"), "A");
}

// What is not a plain file is not read, held or not: a FIFO (no hang), a
// symlink as the last part, a directory.
TEST(HeldFilesTest, OnlyRegularFilesAreRead) {
  xpu::testing::TempDir t;
  ASSERT_EQ(::mkfifo(t.File("fifo").c_str(), 0600), 0);
  WriteInPlace(t.File("real"), "1\n");
  fs::create_symlink(t.File("real"), t.File("link"));
  fs::create_directory(t.File("dir"));
  HeldFiles held;
  std::string out;
  for (const char* name : {"fifo", "link", "dir"}) {
    Status s = held.Read(t.path(), name, &out);
    EXPECT_FALSE(s.ok()) << name;
    EXPECT_NE(s.code(), Status::Code::kNotFound) << name;
  }
  EXPECT_EQ(held.held(), 0u);
  EXPECT_NE(held.Read(t.path(), "fifo", &out).message().find("not a regular file"),
            std::string::npos);
  // Past the size bound: an error, never a partial value.
  WriteInPlace(t.File("huge"), std::string(kMaxAttributeBytes + 1, '1'));
  EXPECT_NE(held.Read(t.path(), "huge", &out).message().find("larger than"), std::string::npos);
}

// Every way a name may come to name another file, in one round and at the
// bound of files held, with inotify's queue overflowing before them (their
// own notices lost): each read after it gives what a fresh open would,
// never a held file's old value, and what is held stays within its bound.
TEST(HeldFilesTest, ManyChangesInOneRoundWithTheQueueOverflowingReadAsAFreshOpen) {
  xpu::testing::TempDir t;
  const std::vector<std::string> cards = {t.File("a"), t.File("b"), t.File("c"), t.File("d")};
  HeldFiles held({/*max_files=*/3, /*max_age=*/std::chrono::hours(1)});
  for (const auto& c : cards) {
    fs::create_directory(c);
    WriteInPlace(c + "/health", "1\n");
    EXPECT_EQ(Read(held, c, "health"), "1\n");
  }
  EXPECT_EQ(held.held(), 3u);  // d is read and closed each time
  // More notices than inotify queues (fs.inotify.max_queued_events,
  // 16,384 by default) in b's directory first: the queue overflows, and
  // the notices of what follows are lost but for that overflow.
  const std::string max_events = xpu::testing::ReadFile("/proc/sys/fs/inotify/max_queued_events");
  const unsigned long queue = max_events.empty() ? 16384 : std::stoul(max_events);
  for (unsigned long i = 0; i < queue / 2 + 16; ++i) {
    WriteInPlace(cards[1] + "/junk", "");
    fs::remove(cards[1] + "/junk");
  }
  // a: its directory made anew; b: replaced by a rename, then written in
  // place; c: its file removed and a directory of that name made; d (not
  // held): written in place.
  fs::remove_all(cards[0]);
  fs::create_directory(cards[0]);
  WriteInPlace(cards[0] + "/health", "0 a\n");
  WriteByRename(cards[1] + "/health", "0 b\n");
  WriteInPlace(cards[1] + "/health", "0 b again\n");
  fs::remove(cards[2] + "/health");
  fs::create_directory(cards[2] + "/health");
  WriteInPlace(cards[3] + "/health", "0 d\n");
  held.Check();
  EXPECT_EQ(Read(held, cards[0], "health"), "0 a\n");
  EXPECT_EQ(Read(held, cards[1], "health"), "0 b again\n");
  std::string out;
  const Status c = held.Read(cards[2], "health", &out);
  EXPECT_FALSE(c.ok()) << "a directory where a held file was read as " << out;
  EXPECT_EQ(Read(held, cards[3], "health"), "0 d\n");
  EXPECT_LE(held.held(), 3u);
  held.Sweep();  // that round's end
  // The next round, with no notice at all: a card swapped whole (another
  // inode listed) and one no round touched.
  struct stat st {};
  const std::string fresh = t.File("fresh");
  fs::create_directory(fresh);
  WriteInPlace(fresh + "/health", "1 swapped\n");
  ASSERT_EQ(::stat(fresh.c_str(), &st), 0);
  fs::rename(cards[0], t.File("gone"));
  fs::rename(fresh, cards[0]);
  held.Check();
  held.Seen(cards[0], st.st_ino);
  EXPECT_EQ(Read(held, cards[0], "health"), "1 swapped\n");
  EXPECT_EQ(Read(held, cards[3], "health"), "0 d\n");
  held.Sweep();  // b and c were not read this round
  EXPECT_FALSE(held.Holding(cards[1]));
  EXPECT_LE(held.held(), 3u);
}

// The real kernel's sysfs: a held attribute read again from offset 0 is
// shown anew. Loopback's received-bytes counter grows with each datagram.
TEST(HeldFilesTest, RealSysfsShowsAHeldAttributeAnewAtEachRead) {
  const std::string dir = "/sys/class/net/lo/statistics";
  std::string first;
  if (!ReadAttribute(dir + "/rx_bytes", &first).ok()) GTEST_SKIP() << "no " << dir << " here";
  HeldFiles held;
  const uint64_t before = std::stoull(Read(held, dir, "rx_bytes"));
  EXPECT_EQ(held.held(), 1u);
  const int s = ::socket(AF_INET, SOCK_DGRAM, 0);
  ASSERT_GE(s, 0);
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(9);  // discard: nobody listens; the datagram still crosses lo
  to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const std::string payload(1000, 'x');
  for (int i = 0; i < 4; ++i)
    ::sendto(s, payload.data(), payload.size(), 0, reinterpret_cast<sockaddr*>(&to), sizeof to);
  ::close(s);
  EXPECT_TRUE(xpu::testing::WaitFor([&] {
    return std::stoull(Read(held, dir, "rx_bytes")) >= before + 4000;
  })) << "a held sysfs attribute read again did not show the counter anew";
  EXPECT_EQ(held.held(), 1u) << "read from the held file, not opened anew";
}

}  // namespace
}  // namespace xpu::hal
