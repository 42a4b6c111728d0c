// yaml::Node: a read-only YAML document tree, built from libyaml's events (a file) or by hand
// (the rules over xDS, from protobuf); the loader's parsers read it through YamlReader.
//
// A Node is a handle (one pointer, copied freely) into a Document, which owns every node; a Node
// is valid while its Document lives. A default Node is undefined (IsDefined() false), as is a
// missing key or index. Scalars keep their text; a plain `~`, `null`, `Null`, `NULL` or empty
// scalar is a null node, and a quoted one (or one tagged !!str) says so (Quoted()), so that
// `"true"` stays a string. Marks are 0-based, as libyaml counts. Not thread-safe to build;
// immutable once built. docs/configuration.md has the YAML the loader accepts.

#ifndef SLUICE_RULES_YAML_TREE_H_
#define SLUICE_RULES_YAML_TREE_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::rules::yaml {

enum class Kind : uint8_t { kUndefined, kNull, kScalar, kSequence, kMap };

struct Mark {
  int line = -1;  // 0-based; -1 when the node was not read from text
  int column = -1;
  bool is_null() const { return line < 0; }
};

struct NodeData;
struct Entry;

class Node {
 public:
  Node() = default;

  Kind kind() const;
  bool IsDefined() const { return kind() != Kind::kUndefined; }
  bool IsNull() const { return kind() == Kind::kNull; }
  bool IsScalar() const { return kind() == Kind::kScalar; }
  bool IsSequence() const { return kind() == Kind::kSequence; }
  bool IsMap() const { return kind() == Kind::kMap; }
  // A scalar's text (empty for other kinds), and whether it was quoted.
  const std::string& Scalar() const;
  bool Quoted() const;
  Mark GetMark() const;

  // A sequence's items or a map's entries, in document order (empty for other kinds).
  std::span<const Node> items() const;
  std::span<const Entry> entries() const;
  size_t size() const;  // items or entries
  // The item at `index`, or the value of the first entry whose key is the scalar `key`;
  // undefined when there is none.
  Node operator[](size_t index) const;
  Node operator[](std::string_view key) const;

  // The same node (not an equal one).
  bool is(const Node& other) const { return data_ == other.data_; }

 private:
  friend class Document;
  explicit Node(NodeData* data) : data_(data) {}
  NodeData* data_ = nullptr;
};

struct Entry {
  Node key, value;
};

struct NodeData {
  Kind kind = Kind::kUndefined;
  bool quoted = false;
  Mark mark;
  std::string scalar;
  std::vector<Node> items;
  std::vector<Entry> entries;
};

// Owns the nodes of one document; built once, then read.
class Document {
 public:
  Document() = default;
  Document(const Document&) = delete;
  Document& operator=(const Document&) = delete;

  Node Null(Mark mark = {});
  Node Scalar(std::string text, bool quoted = false, Mark mark = {});
  Node Sequence(Mark mark = {});
  Node Map(Mark mark = {});
  // Adds to a sequence or a map made by this document.
  void Push(Node sequence, Node item);
  void Set(Node map, Node key, Node value);
  // Set with a plain scalar key; returns the value.
  Node Set(Node map, std::string key, Node value);

  Node root() const { return root_; }
  void set_root(Node root) { root_ = root; }

 private:
  Node Make(Kind kind, Mark mark);
  std::deque<NodeData> nodes_;
  Node root_;
};

struct SyntaxError {
  int line = 0;         // 1-based
  int column = 0;       // 1-based
  std::string message;  // libyaml's problem, and its context ("while scanning ... at 1:8")
};

struct ParseResult {
  // The first document of the stream (root() undefined when the text holds none); null on error.
  std::shared_ptr<const Document> document;
  std::optional<SyntaxError> error;
};

// Parses `text` with libyaml. Every document of the stream is checked for syntax; the first one
// becomes the tree (aliases share their anchor's node).
ParseResult Parse(std::string_view text);

// YAML 1.1's booleans: y/yes/true/on and n/no/false/off, in lower case, Capitalised or UPPER
// case; nullopt otherwise.
std::optional<bool> AsBool(std::string_view text);

// A number as YAML writes one (`0.5`, `+1e-3`, `.5`, `1`); nullopt otherwise (and for inf/nan).
std::optional<double> AsNumber(std::string_view text);

}  // namespace sluice::rules::yaml

#endif  // SLUICE_RULES_YAML_TREE_H_
