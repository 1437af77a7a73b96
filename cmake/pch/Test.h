// Precompiled for the GoogleTest suites (cmake/PipeForgePch.cmake).
#include <gtest/gtest.h>

#include <string>
#include <vector>
