#include "hal/attribute_files.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <vector>

#include "common/file_util.h"

namespace xpu::hal {

namespace {

// What a directory says that may make a held name another file's.
constexpr uint32_t kWatchMask = IN_CREATE | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO |
                                IN_DELETE_SELF | IN_MOVE_SELF | IN_ONLYDIR;

// O_NONBLOCK: a FIFO or a driver attribute that blocks must not hang the
// sampler (and with it SIGTERM); only regular files are read.
constexpr int kAttributeFlags = O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK;

// `fd` (open) whole from its start: a read from offset 0 makes sysfs show
// the attribute again. Errors name `path()`.
template <typename Path>
Status ReadFromStart(int fd, const Path& path, std::string* out) {
  out->clear();
  char buf[4096];
  for (;;) {
    const ssize_t n = ::pread(fd, buf, sizeof buf, static_cast<off_t>(out->size()));
    if (n < 0) {
      const int err = errno;
      if (err == EINTR) continue;
      // A PCI attribute whose device does not answer its config space (a
      // disconnected device: the link files' show fails with EINVAL).
      if (err == EINVAL)
        return Status::Unavailable(path() + ": " + ErrnoText(err) +
                                   " (the device does not answer)");
      return Status::IoError(path() + ": " + ErrnoText(err));
    }
    out->append(buf, static_cast<size_t>(n));
    if (out->size() > kMaxAttributeBytes)
      return Status::IoError(path() + ": larger than " + std::to_string(kMaxAttributeBytes) +
                             " bytes");
    // Short: the end (a regular file's; sysfs gives a show() whole).
    if (static_cast<size_t>(n) < sizeof buf) return Status::Ok();
  }
}

// Opens `name` in `dirfd` (AT_FDCWD: `name` is a path), a regular file or
// an error naming `path()`; NotFound when there is none.
template <typename Path>
Status OpenAttribute(int dirfd, const char* name, const Path& path, int* fd) {
  *fd = ::openat(dirfd, name, kAttributeFlags);
  if (*fd < 0) {
    const int err = errno;
    return err == ENOENT ? Status::NotFound(path() + ": " + ErrnoText(err))
                         : Status::IoError(path() + ": " + ErrnoText(err));
  }
  struct stat st {};
  if (::fstat(*fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(*fd);
    *fd = -1;
    return Status::IoError(path() + ": not a regular file");
  }
  return Status::Ok();
}

template <typename Path>
Status ReadOnce(int dirfd, const char* name, const Path& path, std::string* out) {
  int fd = -1;
  Status s = OpenAttribute(dirfd, name, path, &fd);
  if (!s.ok()) return s;
  s = ReadFromStart(fd, path, out);
  ::close(fd);
  return s;
}

}  // namespace

Status ReadAttribute(const std::string& path, std::string* out) {
  return ReadOnce(
      AT_FDCWD, path.c_str(), [&] { return path; }, out);
}

Status ReadAttributeAt(int dirfd, const char* name, const std::string& dir, std::string* out) {
  return ReadOnce(
      dirfd, name, [&] { return dir + "/" + name; }, out);
}

DirectoryListing::DirectoryListing(const std::string& dir) : dir_(dir) {
  dir_stream_ = ::opendir(dir.c_str());
  if (dir_stream_ == nullptr) status_ = Status::IoError(dir + ": " + ErrnoText(errno));
}

DirectoryListing::~DirectoryListing() {
  if (dir_stream_ != nullptr) ::closedir(static_cast<DIR*>(dir_stream_));
}

bool DirectoryListing::Next(std::string* name, uint64_t* inode, unsigned char* type) {
  if (dir_stream_ == nullptr || !status_.ok()) return false;
  for (;;) {
    errno = 0;
    // NOLINTNEXTLINE(concurrency-mt-unsafe): a DIR of its own
    const dirent* e = ::readdir(static_cast<DIR*>(dir_stream_));
    if (e == nullptr) {
      if (errno != 0) status_ = Status::IoError(dir_ + ": " + ErrnoText(errno));
      return false;
    }
    *name = e->d_name;
    if (*name == "." || *name == "..") continue;
    *inode = e->d_ino;
    *type = e->d_type;
    return true;
  }
}

HeldFiles::HeldFiles(Options options) : options_(options) {
  inotify_ = ::inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
}

HeldFiles::~HeldFiles() {
  Clear();
  if (inotify_ >= 0) ::close(inotify_);
}

HeldFiles::Dir* HeldFiles::Watched(const std::string& dir,
                                   std::chrono::steady_clock::time_point now) {
  if (inotify_ < 0) return nullptr;
  Dir& d = dirs_[dir];
  d.touched = true;
  if (d.wd >= 0) return &d;
  // Refused (a limit of inotify's, reached for now): read as ReadAttribute
  // does, and asked again after max_age.
  if (d.wd == -2 && now - d.refused < options_.max_age) return nullptr;
  // Two paths of one directory (a symlink and its target) share its
  // watch descriptor: each is let go as the other is.
  d.wd = ::inotify_add_watch(inotify_, dir.c_str(), kWatchMask);
  if (d.wd < 0) {
    d.wd = -2;
    d.refused = now;
    return nullptr;
  }
  by_wd_.emplace(d.wd, dir);
  return &d;
}

void HeldFiles::Close(Dir& d, std::map<std::string, File>::iterator it) {
  ::close(it->second.fd);
  d.files.erase(it);
  --held_;
}

void HeldFiles::Unwatch(std::map<std::string, Dir>::iterator it) {
  Dir& d = it->second;
  while (!d.files.empty()) Close(d, d.files.begin());
  const int wd = d.wd;
  if (wd >= 0) {
    const auto [from, to] = by_wd_.equal_range(wd);
    for (auto w = from; w != to; ++w) {
      if (w->second != it->first) continue;
      by_wd_.erase(w);
      break;
    }
    // Another path of the same directory keeps the watch.
    if (by_wd_.count(wd) == 0) ::inotify_rm_watch(inotify_, wd);
  }
  dirs_.erase(it);
}

Status HeldFiles::Read(const std::string& dir, const char* name, std::string* out) {
  const auto now = std::chrono::steady_clock::now();
  auto path = [&] { return dir + "/" + name; };
  Dir* d = Watched(dir, now);
  if (d != nullptr) {
    auto it = d->files.find(name);
    if (it != d->files.end()) {
      if (now - it->second.opened < options_.max_age &&
          ReadFromStart(it->second.fd, path, out).ok())
        return Status::Ok();
      Close(*d, it);  // too old, or gone (a removed device): opened anew
    }
  }
  // The watch is in place before the open: a replacement after it is said.
  const std::string full = path();
  int fd = -1;
  if (Status s = OpenAttribute(AT_FDCWD, full.c_str(), path, &fd); !s.ok()) return s;
  Status s = ReadFromStart(fd, path, out);
  if (!s.ok() || d == nullptr || held_ >= options_.max_files) {
    ::close(fd);
    return s;
  }
  d->files[name] = File{fd, now};
  ++held_;
  return Status::Ok();
}

void HeldFiles::Check() {
  if (inotify_ < 0) return;
  alignas(inotify_event) char buf[8192];
  for (;;) {
    const ssize_t n = ::read(inotify_, buf, sizeof buf);
    if (n <= 0) return;  // EAGAIN: nothing more
    for (ssize_t at = 0; at < n;) {
      const auto* e = reinterpret_cast<const inotify_event*>(buf + at);
      at += static_cast<ssize_t>(sizeof(inotify_event) + e->len);
      if ((e->mask & IN_Q_OVERFLOW) != 0) {
        Clear();
        continue;
      }
      std::vector<std::string> paths;
      const auto [from, to] = by_wd_.equal_range(e->wd);
      for (auto w = from; w != to; ++w) paths.push_back(w->second);
      for (const std::string& path : paths) {
        auto it = dirs_.find(path);
        if (it == dirs_.end()) continue;
        if ((e->mask & (IN_DELETE_SELF | IN_MOVE_SELF | IN_IGNORED)) != 0 || e->len == 0) {
          Unwatch(it);
          continue;
        }
        if (auto f = it->second.files.find(e->name); f != it->second.files.end())
          Close(it->second, f);
      }
    }
  }
}

void HeldFiles::Seen(const std::string& dir, uint64_t inode) {
  if (inotify_ < 0) return;
  auto it = dirs_.find(dir);
  if (it != dirs_.end() && it->second.inode != inode) Unwatch(it);  // another entry now
  Dir& d = dirs_[dir];
  d.inode = inode;
  d.touched = true;
}

void HeldFiles::Sweep() {
  for (auto it = dirs_.begin(); it != dirs_.end();) {
    if (it->second.touched) {
      it->second.touched = false;
      ++it;
    } else {
      Unwatch(it++);
    }
  }
}

void HeldFiles::Forget(const std::string& dir) {
  if (auto it = dirs_.find(dir); it != dirs_.end()) Unwatch(it);
}

void HeldFiles::Clear() {
  while (!dirs_.empty()) Unwatch(dirs_.begin());
}

}  // namespace xpu::hal
