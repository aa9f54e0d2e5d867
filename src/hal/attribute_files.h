#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>

#include "common/status.h"

namespace xpu::hal {

// sysfs attributes are small; anything bigger is not one of ours.
inline constexpr size_t kMaxAttributeBytes = size_t{64} * 1024;

// Reads one sysfs attribute (or any small file) whole: opened without
// following a final symlink and non-blocking, so a FIFO or a blocking
// driver attribute cannot hang the sampler; only regular files, at most
// kMaxAttributeBytes. Errors name the path.
Status ReadAttribute(const std::string& path, std::string* out);
// The same for `name` in the directory open as `dirfd` (a path walk of one
// component, not of the whole path); errors name `dir`/`name`. NotFound
// when there is no such file.
Status ReadAttributeAt(int dirfd, const char* name, const std::string& dir, std::string* out);

// The entries of a directory with their inodes (readdir's d_ino) and types,
// `.` and `..` left out: what the samplers list each round. One thread.
class DirectoryListing {
 public:
  explicit DirectoryListing(const std::string& dir);
  ~DirectoryListing();
  DirectoryListing(const DirectoryListing&) = delete;
  DirectoryListing& operator=(const DirectoryListing&) = delete;
  // The next entry; false at the end, or on an error that status() says.
  bool Next(std::string* name, uint64_t* inode, unsigned char* type);
  // IoError naming the directory when it could not be opened or read.
  const Status& status() const { return status_; }

 private:
  std::string dir_;
  void* dir_stream_ = nullptr;  // DIR*
  Status status_;
};

// The sysfs attribute files a sampler reads every interval, held open and
// read again with one pread() each (docs/hal.md, "Cadences"): opening,
// checking, reading and closing a file cost five system calls and a path
// walk each time, most of an idle node's HAL cost. sysfs makes a file's
// show() again at each read from offset 0, so a held file reads what
// reading it anew would.
//
// A held file is let go, and opened anew at its next read, when its name
// may now name another file:
// - its directory says so (inotify): a file of that name created, moved in
//   or away, or deleted; the directory itself deleted or moved; the queue
//   overflowed (every file let go);
// - a read of it fails (a removed device's attributes answer ENODEV);
// - its directory's entry is another inode now (Seen: a card's hot swap
//   makes its directory anew), or the directory is not listed (Sweep), or
//   the caller says so (Forget);
// - it was opened longer than `max_age` ago: a bound on what a notice the
//   kernel does not give could cost.
// Where inotify cannot be had (a limit reached) or a directory cannot be
// watched, nothing is held there: each read opens the file, as
// ReadAttribute does. At most `max_files` are held.
//
// Owned and called by one thread (a sampler's).
class HeldFiles {
 public:
  struct Options {
    size_t max_files = 512;
    std::chrono::milliseconds max_age{10000};
  };
  HeldFiles() : HeldFiles(Options{}) {}
  explicit HeldFiles(Options options);
  ~HeldFiles();
  HeldFiles(const HeldFiles&) = delete;
  HeldFiles& operator=(const HeldFiles&) = delete;

  // `dir`/`name` whole, as ReadAttributeAt reads it; from the held file
  // when one is.
  Status Read(const std::string& dir, const char* name, std::string* out);
  // Takes what the directories said since the last call: before each round.
  void Check();
  // The directory entry `dir` is inode `inode` now (its parent's listing
  // says): files held in it while it was another are let go.
  void Seen(const std::string& dir, uint64_t inode);
  // After each round: lets go of the files of each directory neither Seen
  // nor read since the last Sweep (a card gone).
  void Sweep();
  // Lets go of every file held in `dir`.
  void Forget(const std::string& dir);
  // Lets go of every file.
  void Clear();
  size_t held() const { return held_; }
  // Whether files in `dir` are held (a directory read through Read before).
  bool Holding(const std::string& dir) const {
    auto it = dirs_.find(dir);
    return it != dirs_.end() && it->second.wd >= 0;
  }
  // Whether `dir`/`name` is held now: read through Read, and not let go
  // since (a notice of its name created, moved or deleted; a failed read; its
  // directory another or not listed).
  bool Holds(const std::string& dir, const char* name) const {
    auto it = dirs_.find(dir);
    return it != dirs_.end() && it->second.files.count(name) > 0;
  }
  // Whether files are held at all (inotify could be had).
  bool holding() const { return inotify_ >= 0; }

 private:
  struct File {
    int fd = -1;
    std::chrono::steady_clock::time_point opened;
  };
  struct Dir {
    int wd = -1;  // its inotify watch; -1 before the first read, -2: none to be had
    std::chrono::steady_clock::time_point refused;  // with -2: tried again max_age after
    uint64_t inode = 0;                             // as its parent's listing gave it (Seen)
    bool touched = false;                           // since the last Sweep
    std::map<std::string, File> files;
  };
  // The watched directory `dir`, watched now if it was not; nullptr when it
  // cannot be.
  Dir* Watched(const std::string& dir, std::chrono::steady_clock::time_point now);
  void Close(Dir& d, std::map<std::string, File>::iterator it);
  void Unwatch(std::map<std::string, Dir>::iterator it);

  const Options options_;
  int inotify_ = -1;
  size_t held_ = 0;
  std::map<std::string, Dir> dirs_;
  // Each watch's paths (two when a symlink and its target are both read).
  std::multimap<int, std::string> by_wd_;
};

}  // namespace xpu::hal
