#include "rules/yaml_tree.h"

#include <gtest/gtest.h>

namespace sluice::rules::yaml {
namespace {

// The root of a parse that succeeded (`parsed` owns the nodes: keep it while reading them).
Node RootOf(const ParseResult& parsed) {
  EXPECT_FALSE(parsed.error) << parsed.error->message;
  return parsed.document != nullptr ? parsed.document->root() : Node();
}

TEST(YamlTreeTest, MapsSequencesAndScalarsKeepTheirOrderAndMarks) {
  const ParseResult parsed =
      Parse("domain: api\ndescriptors:\n  - key: user\n    value: x\n  - b\n");
  const Node root = RootOf(parsed);
  ASSERT_TRUE(root.IsMap());
  ASSERT_EQ(root.size(), 2u);
  EXPECT_EQ(root.entries()[0].key.Scalar(), "domain");
  EXPECT_EQ(root["domain"].Scalar(), "api");
  const Node list = root["descriptors"];
  ASSERT_TRUE(list.IsSequence());
  ASSERT_EQ(list.size(), 2u);
  EXPECT_EQ(list[0]["value"].Scalar(), "x");
  EXPECT_EQ(list[0]["value"].GetMark().line, 3);
  EXPECT_EQ(list[0]["value"].GetMark().column, 11);
  EXPECT_EQ(list[1].Scalar(), "b");
  EXPECT_FALSE(list[2].IsDefined());
  EXPECT_FALSE(root["missing"].IsDefined());
  EXPECT_FALSE(list["key"].IsDefined());  // a sequence has no keys
  EXPECT_TRUE(Node().GetMark().is_null());
}

TEST(YamlTreeTest, PlainNullSpellingsAreNullAndQuotedOnesAreStrings) {
  const ParseResult parsed =
      Parse("a:\nb: ~\nc: null\nd: NULL\ne: 'null'\nf: \"\"\ng: !!str null\n");
  const Node root = RootOf(parsed);
  for (const char* key : {"a", "b", "c", "d"}) EXPECT_TRUE(root[key].IsNull()) << key;
  for (const char* key : {"e", "f", "g"}) {
    EXPECT_TRUE(root[key].IsScalar()) << key;
    EXPECT_TRUE(root[key].Quoted()) << key;
  }
  EXPECT_EQ(root["e"].Scalar(), "null");
  const ParseResult other = Parse("a: nULL\nb: true\n");
  EXPECT_TRUE(RootOf(other)["a"].IsScalar());
  EXPECT_FALSE(RootOf(other)["b"].Quoted());
}

TEST(YamlTreeTest, AliasesShareTheirAnchorsNode) {
  const ParseResult parsed = Parse("a: &x {k: v}\nb: *x\n");
  const Node root = RootOf(parsed);
  EXPECT_TRUE(root["a"].is(root["b"]));
  EXPECT_EQ(root["b"]["k"].Scalar(), "v");
}

TEST(YamlTreeTest, AnAliasInsideItsOwnAnchorIsUndefinedNotACycle) {
  const ParseResult parsed = Parse("a: &x [1, *x]\n");
  ASSERT_TRUE(parsed.error);
  EXPECT_EQ(parsed.document, nullptr);
  EXPECT_NE(parsed.error->message.find("undefined alias 'x'"), std::string::npos)
      << parsed.error->message;
  EXPECT_EQ(parsed.error->line, 1);
  EXPECT_EQ(parsed.error->column, 11);
}

TEST(YamlTreeTest, AliasesThatExpandPastTenMillionNodesAreRefused) {
  // Nine levels of ten aliases each: 10^9 nodes when walked, from a few lines of text.
  std::string text = "l0: &l0 [x, x, x, x, x, x, x, x, x, x]\n";
  for (int level = 1; level <= 9; ++level) {
    text += "l" + std::to_string(level) + ": &l" + std::to_string(level) + " [";
    for (int i = 0; i < 10; ++i) text += (i > 0 ? ", *l" : "*l") + std::to_string(level - 1);
    text += "]\n";
  }
  const ParseResult parsed = Parse(text);
  ASSERT_TRUE(parsed.error);
  EXPECT_NE(parsed.error->message.find("aliases expand the document past 10000000 nodes"),
            std::string::npos)
      << parsed.error->message;
  EXPECT_EQ(parsed.error->line, 7);  // l6 (11,111,111 nodes) is the first past it
  // Up to l5 (1,111,111 nodes) is fine.
  const ParseResult fine = Parse(text.substr(0, text.find("l6:")));
  EXPECT_FALSE(fine.error) << fine.error->message;
}

TEST(YamlTreeTest, TheFirstDocumentIsTheTreeAndEveryDocumentIsChecked) {
  const ParseResult two = Parse("a: 1\n---\na: 2\n");
  EXPECT_EQ(RootOf(two)["a"].Scalar(), "1");
  const ParseResult bad = Parse("a: 1\n---\nb: [1\n");
  ASSERT_TRUE(bad.error);
  EXPECT_EQ(bad.document, nullptr);
  EXPECT_EQ(bad.error->line, 4);
  // A quoted scalar left open at the end of the text is an error, not a string.
  const ParseResult open = Parse("domain: 'abc\n");
  ASSERT_TRUE(open.error);
  EXPECT_NE(open.error->message.find("quoted scalar"), std::string::npos) << open.error->message;
  // No document at all: an undefined root.
  const ParseResult none = Parse("# only a comment\n");
  EXPECT_FALSE(RootOf(none).IsDefined());
}

TEST(YamlTreeTest, DuplicateAndNonScalarKeysAreKeptForTheReaderToReport) {
  const ParseResult parsed = Parse("a: 1\na: 2\n? [x]\n: 3\n");
  const Node root = RootOf(parsed);
  ASSERT_EQ(root.size(), 3u);
  EXPECT_EQ(root["a"].Scalar(), "1");  // the first
  EXPECT_TRUE(root.entries()[2].key.IsSequence());
  EXPECT_EQ(root.entries()[2].value.Scalar(), "3");
}

TEST(YamlTreeTest, BooleansInYaml11Spellings) {
  for (const char* yes :
       {"y", "Y", "yes", "Yes", "YES", "true", "True", "TRUE", "on", "On", "ON"}) {
    EXPECT_EQ(AsBool(yes), true) << yes;
  }
  for (const char* no : {"n", "N", "no", "No", "NO", "false", "False", "FALSE", "off", "OFF"}) {
    EXPECT_EQ(AsBool(no), false) << no;
  }
  for (const char* neither : {"tRue", "TRue", "1", "0", "", "yess", "nope"}) {
    EXPECT_EQ(AsBool(neither), std::nullopt) << neither;
  }
}

TEST(YamlTreeTest, NumbersAsYamlWritesThem) {
  EXPECT_EQ(AsNumber("0.5"), 0.5);
  EXPECT_EQ(AsNumber("+1e-3"), 1e-3);
  EXPECT_EQ(AsNumber(".5"), 0.5);
  EXPECT_EQ(AsNumber("-2"), -2.0);
  for (const char* bad : {"", "0x10", "inf", ".inf", "nan", " 1", "1 ", "1.5x", "1e999"}) {
    EXPECT_EQ(AsNumber(bad), std::nullopt) << bad;
  }
}

TEST(YamlTreeTest, ADocumentBuiltByHandReadsLikeAParsedOne) {
  Document doc;
  const Node root = doc.Map();
  doc.Set(root, "domain", doc.Scalar("api"));
  const Node list = doc.Set(root, "descriptors", doc.Sequence());
  doc.Push(list, doc.Scalar("x", /*quoted=*/true));
  doc.set_root(root);
  EXPECT_EQ(doc.root()["domain"].Scalar(), "api");
  EXPECT_TRUE(doc.root()["descriptors"][0].Quoted());
  EXPECT_TRUE(doc.root()["domain"].GetMark().is_null());
}

}  // namespace
}  // namespace sluice::rules::yaml
