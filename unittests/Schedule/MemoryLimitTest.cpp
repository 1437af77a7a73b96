//===- MemoryLimitTest.cpp - parseMemoryLimit / resolveMemoryLimit --------===//

#include "pipeforge/Schedule/MemoryLimit.h"

#include <gtest/gtest.h>

using namespace pipeforge::sched;

namespace {

MemoryLimit parseOk(const std::string &s) {
  auto r = parseMemoryLimit(s);
  EXPECT_TRUE(r.isOk()) << s << ": " << r.message();
  return r ? *r : MemoryLimit{};
}

std::string parseErr(const std::string &s) {
  auto r = parseMemoryLimit(s);
  EXPECT_FALSE(r.isOk()) << s;
  return r.message();
}

TEST(MemoryLimit, PlainNumberIsMB) {
  MemoryLimit l = parseOk("3.5");
  EXPECT_EQ(l.unit, MemoryLimit::Unit::MB);
  EXPECT_DOUBLE_EQ(l.value, 3.5);
  EXPECT_DOUBLE_EQ(parseOk("0").value, 0);
  EXPECT_DOUBLE_EQ(parseOk(" 2 ").value, 2);
  EXPECT_DOUBLE_EQ(*resolveMemoryLimit(l, 4, -1), 3.5);
}

TEST(MemoryLimit, PerRank) {
  MemoryLimit l = parseOk("2p");
  EXPECT_EQ(l.unit, MemoryLimit::Unit::PerRank);
  EXPECT_DOUBLE_EQ(l.value, 2);
  EXPECT_DOUBLE_EQ(*resolveMemoryLimit(l, 4, -1), 8);
  EXPECT_DOUBLE_EQ(*resolveMemoryLimit(parseOk("1.5p"), 4, 100), 6);
}

TEST(MemoryLimit, DecimalBytes) {
  EXPECT_DOUBLE_EQ(parseOk("1e9B").value, 1e9);
  EXPECT_DOUBLE_EQ(parseOk("512B").value, 512);
  EXPECT_DOUBLE_EQ(parseOk("3KB").value, 3e3);
  EXPECT_DOUBLE_EQ(parseOk("2.5MB").value, 2.5e6);
  EXPECT_DOUBLE_EQ(parseOk("12GB").value, 12e9);
  EXPECT_DOUBLE_EQ(parseOk("12 GB").value, 12e9);
  EXPECT_TRUE(parseOk("12GB").isBytes());
}

TEST(MemoryLimit, BinaryBytes) {
  EXPECT_DOUBLE_EQ(parseOk("1KiB").value, 1024);
  EXPECT_DOUBLE_EQ(parseOk("512MiB").value, 512.0 * 1024 * 1024);
  EXPECT_DOUBLE_EQ(parseOk("2GiB").value, 2.0 * 1024 * 1024 * 1024);
}

TEST(MemoryLimit, BytesToMB) {
  MemoryLimit l = parseOk("1000B");
  auto r = resolveMemoryLimit(l, 4, 250);
  ASSERT_TRUE(r.isOk());
  EXPECT_DOUBLE_EQ(*r, 4);
}

TEST(MemoryLimit, BytesWithoutMBSizeIsAnError) {
  auto r = resolveMemoryLimit(parseOk("12GB"), 4, 0, "give --hidden");
  ASSERT_FALSE(r.isOk());
  EXPECT_NE(r.message().find("in bytes"), std::string::npos) << r.message();
  EXPECT_NE(r.message().find("give --hidden"), std::string::npos)
      << r.message();
}

TEST(MemoryLimit, Rejects) {
  EXPECT_NE(parseErr("").find("is empty"), std::string::npos);
  EXPECT_NE(parseErr("GB").find("does not start with a number"),
            std::string::npos);
  EXPECT_NE(parseErr("-1").find("is negative"), std::string::npos);
  EXPECT_NE(parseErr("-2GB").find("is negative"), std::string::npos);
  EXPECT_NE(parseErr("inf").find("not finite"), std::string::npos);
  EXPECT_NE(parseErr("nan").find("not finite"), std::string::npos);
  std::string e = parseErr("12Gb");
  EXPECT_NE(e.find("unknown unit 'Gb'"), std::string::npos) << e;
  EXPECT_NE(e.find("512MiB"), std::string::npos) << e; // names the forms
  parseErr("12TB");
  parseErr("2pp");
  parseErr("2 p x");
  parseErr("1kb");
}

TEST(MemoryLimit, ActivationBytesPerLayer) {
  // s b (34h + 5as): h = 1024, a = 16, s = 1024, b = 1.
  EXPECT_DOUBLE_EQ(activationBytesPerLayer(1024, 16, 1024, 1),
                   1024.0 * (34 * 1024 + 5 * 16 * 1024));
  EXPECT_DOUBLE_EQ(activationBytesPerLayer(8, 2, 4, 3),
                   4.0 * 3 * (34 * 8 + 5 * 2 * 4));
}

TEST(MemoryLimit, FormatBytes) {
  EXPECT_EQ(formatBytes(512), "512 B");
  EXPECT_EQ(formatBytes(1536), "1536 B (1.50 KiB)");
}

} // namespace
