// File: cmake/pch_anchor_main.cpp
// The source of the executable that holds the tests' precompiled header (qsync_pch_holder).
int main() { return 0; }
