// File: cmake/pch_anchor.cpp
// The one source of the targets that hold QSync's precompiled headers (cmake/qsync_helpers.cmake:
// qsync_pch_holder): the targets of a kind reuse their compiled header.
int qsync_pch_anchor() { return 0; }
