// The shared precompiled header (cmake/pch.cmake) is made from this target.
