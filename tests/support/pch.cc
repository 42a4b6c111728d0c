// The object that makes the test binaries' shared precompiled header (sluice_test_pch,
// cmake/SluiceModule.cmake); it has no code of its own.
