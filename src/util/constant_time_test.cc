#include "util/constant_time.h"

#include <gtest/gtest.h>

#include <string>

namespace sluice::util {
namespace {

TEST(ConstantTimeEqualsTest, EqualOnlyWhenEveryByteAndTheLengthAgree) {
  EXPECT_TRUE(ConstantTimeEquals("s3cret", "s3cret"));
  EXPECT_TRUE(ConstantTimeEquals("", ""));
  EXPECT_FALSE(ConstantTimeEquals("x3cret", "s3cret"));        // first byte
  EXPECT_FALSE(ConstantTimeEquals("s3creT", "s3cret"));        // last byte
  EXPECT_FALSE(ConstantTimeEquals("s3cre", "s3cret"));         // a prefix
  EXPECT_FALSE(ConstantTimeEquals("s3crets3cret", "s3cret"));  // the secret twice
  EXPECT_FALSE(ConstantTimeEquals("s3crett", "s3cret"));
  EXPECT_FALSE(ConstantTimeEquals("", "s3cret"));
  EXPECT_FALSE(ConstantTimeEquals("s3cret", ""));
  // Bytes above 0x7f compare as bytes.
  EXPECT_TRUE(ConstantTimeEquals(std::string("\xff\x80", 2), std::string("\xff\x80", 2)));
  EXPECT_FALSE(ConstantTimeEquals(std::string("\xff\x80", 2), std::string("\xff\x81", 2)));
}

}  // namespace
}  // namespace sluice::util
