#include "rules/yaml_tree.h"

#include <yaml.h>

#include <cmath>
#include <cstdlib>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "fmt/format.h"

namespace sluice::rules::yaml {

namespace {

const std::string& EmptyString() {
  static const std::string* const kEmpty = new std::string;
  return *kEmpty;
}

// Lower case, Capitalised or UPPER case: the spellings YAML 1.1 gives its constants.
bool FlexibleCaseEquals(std::string_view text, std::string_view lower) {
  if (text.size() != lower.size() || text.empty()) return false;
  const auto upper = [](char c) { return static_cast<char>(c - 'a' + 'A'); };
  bool all_lower = true, all_upper = true, capitalised = text[0] == upper(lower[0]);
  for (size_t i = 0; i < text.size(); ++i) {
    const bool letter = lower[i] >= 'a' && lower[i] <= 'z';
    all_lower = all_lower && text[i] == lower[i];
    all_upper = all_upper && text[i] == (letter ? upper(lower[i]) : lower[i]);
    if (i > 0) capitalised = capitalised && text[i] == lower[i];
  }
  return all_lower || all_upper || capitalised;
}

bool IsNullText(std::string_view text) {
  return text.empty() || text == "~" || text == "null" || text == "Null" || text == "NULL";
}

Mark MarkOf(const yaml_mark_t& mark) {
  return {static_cast<int>(mark.line), static_cast<int>(mark.column)};
}

// A document's nodes with every alias expanded, at most: aliases share their anchor's node, but
// whoever walks the tree walks an alias as often as it is used, so a few lines of nested aliases
// ("billion laughs") would make the loader walk billions of nodes. A 10,000-descriptor rule set
// has about 100,000.
constexpr uint64_t kMaxExpandedNodes = 10'000'000;

// Builds the first document of a stream from libyaml's events. A collection joins its parent and
// its anchor becomes usable when it ends, so an alias can never point into its own anchor (a
// cycle): inside it, the anchor is undefined.
class Builder {
 public:
  explicit Builder(Document* document) : document_(document) {}

  const std::optional<SyntaxError>& error() const { return error_; }

  // Takes one event.
  void Take(const yaml_event_t& event) {
    if (done_ || error_) return;
    const Mark mark = MarkOf(event.start_mark);
    switch (event.type) {
      case YAML_SCALAR_EVENT: {
        const auto& s = event.data.scalar;
        std::string_view text(reinterpret_cast<const char*>(s.value), s.length);
        const std::string_view tag =
            s.tag != nullptr ? reinterpret_cast<const char*>(s.tag) : std::string_view();
        const bool quoted =
            s.style != YAML_PLAIN_SCALAR_STYLE || tag == "!" || tag == "tag:yaml.org,2002:str";
        const Node node = !quoted && tag.empty() && IsNullText(text)
                              ? document_->Null(mark)
                              : document_->Scalar(std::string(text), quoted, mark);
        Anchor(s.anchor, node, 1);
        Add(node, 1, mark);
        break;
      }
      case YAML_SEQUENCE_START_EVENT:
        Open(document_->Sequence(mark), event.data.sequence_start.anchor);
        break;
      case YAML_MAPPING_START_EVENT:
        Open(document_->Map(mark), event.data.mapping_start.anchor);
        break;
      case YAML_SEQUENCE_END_EVENT:
      case YAML_MAPPING_END_EVENT: {
        Collection done = std::move(open_.back());
        open_.pop_back();
        if (!done.anchor.empty()) anchors_[done.anchor] = {done.node, done.size};
        Add(done.node, done.size, done.node.GetMark());
        break;
      }
      case YAML_ALIAS_EVENT: {
        const auto* name = reinterpret_cast<const char*>(event.data.alias.anchor);
        const auto it = anchors_.find(name);
        if (it == anchors_.end()) {
          Fail(mark, fmt::format("found undefined alias '{}' (an alias must follow its whole "
                                 "anchored node)",
                                 name));
          return;
        }
        Add(it->second.node, it->second.size, mark);
        break;
      }
      case YAML_DOCUMENT_END_EVENT:
        done_ = true;
        break;
      default:
        break;
    }
  }

 private:
  struct Collection {
    Node node;
    std::string anchor;
    uint64_t size = 1;     // expanded nodes
    Node key;              // a map's key waiting for its value
    bool has_key = false;  // (a key may itself be null)
  };
  struct Anchored {
    Node node;
    uint64_t size = 1;
  };

  void Open(Node node, const yaml_char_t* anchor) {
    Collection c;
    c.node = node;
    if (anchor != nullptr) c.anchor = reinterpret_cast<const char*>(anchor);
    open_.push_back(std::move(c));
  }

  void Anchor(const yaml_char_t* anchor, Node node, uint64_t size) {
    if (anchor != nullptr) anchors_[reinterpret_cast<const char*>(anchor)] = {node, size};
  }

  void Fail(Mark mark, std::string message) {
    error_ = SyntaxError{mark.line + 1, mark.column + 1, std::move(message)};
  }

  // `size`: the node's expanded size (see kMaxExpandedNodes).
  void Add(Node node, uint64_t size, Mark mark) {
    if (open_.empty()) {
      document_->set_root(node);
      return;
    }
    Collection& parent = open_.back();
    parent.size += size;
    if (parent.size > kMaxExpandedNodes) {
      Fail(mark, fmt::format("aliases expand the document past {} nodes", kMaxExpandedNodes));
      return;
    }
    if (parent.node.IsSequence()) {
      document_->Push(parent.node, node);
    } else if (!parent.has_key) {
      parent.key = node;
      parent.has_key = true;
    } else {
      document_->Set(parent.node, parent.key, node);
      parent.has_key = false;
    }
  }

  Document* document_;
  std::vector<Collection> open_;
  absl::flat_hash_map<std::string, Anchored> anchors_;
  std::optional<SyntaxError> error_;
  bool done_ = false;
};

}  // namespace

Kind Node::kind() const { return data_ == nullptr ? Kind::kUndefined : data_->kind; }

const std::string& Node::Scalar() const {
  return data_ != nullptr && data_->kind == Kind::kScalar ? data_->scalar : EmptyString();
}

bool Node::Quoted() const { return data_ != nullptr && data_->quoted; }

Mark Node::GetMark() const { return data_ == nullptr ? Mark{} : data_->mark; }

std::span<const Node> Node::items() const {
  if (data_ == nullptr) return {};
  return data_->items;
}

std::span<const Entry> Node::entries() const {
  if (data_ == nullptr) return {};
  return data_->entries;
}

size_t Node::size() const {
  if (data_ == nullptr) return 0;
  return data_->kind == Kind::kMap ? data_->entries.size() : data_->items.size();
}

Node Node::operator[](size_t index) const {
  if (data_ == nullptr || index >= data_->items.size()) return Node();
  return data_->items[index];
}

Node Node::operator[](std::string_view key) const {
  if (data_ == nullptr) return Node();
  for (const Entry& e : data_->entries) {
    if (e.key.IsScalar() && e.key.data_->scalar == key) return e.value;
  }
  return Node();
}

Node Document::Make(Kind kind, Mark mark) {
  NodeData& data = nodes_.emplace_back();
  data.kind = kind;
  data.mark = mark;
  return Node(&data);
}

Node Document::Null(Mark mark) { return Make(Kind::kNull, mark); }

Node Document::Scalar(std::string text, bool quoted, Mark mark) {
  Node node = Make(Kind::kScalar, mark);
  node.data_->scalar = std::move(text);
  node.data_->quoted = quoted;
  return node;
}

Node Document::Sequence(Mark mark) { return Make(Kind::kSequence, mark); }

Node Document::Map(Mark mark) { return Make(Kind::kMap, mark); }

void Document::Push(Node sequence, Node item) { sequence.data_->items.push_back(item); }

void Document::Set(Node map, Node key, Node value) { map.data_->entries.push_back({key, value}); }

Node Document::Set(Node map, std::string key, Node value) {
  Set(map, Scalar(std::move(key)), value);
  return value;
}

ParseResult Parse(std::string_view text) {
  yaml_parser_t parser;
  if (yaml_parser_initialize(&parser) == 0) {
    return {nullptr, SyntaxError{0, 0, "out of memory"}};
  }
  yaml_parser_set_input_string(&parser, reinterpret_cast<const unsigned char*>(text.data()),
                               text.size());
  auto document = std::make_shared<Document>();
  Builder builder(document.get());
  ParseResult result;
  for (;;) {
    yaml_event_t event;
    if (yaml_parser_parse(&parser, &event) == 0) {
      SyntaxError e;
      e.line = static_cast<int>(parser.problem_mark.line) + 1;
      e.column = static_cast<int>(parser.problem_mark.column) + 1;
      e.message = parser.problem != nullptr ? parser.problem : "malformed YAML";
      if (parser.context != nullptr) {
        e.message += fmt::format(" ({} at {}:{})", parser.context, parser.context_mark.line + 1,
                                 parser.context_mark.column + 1);
      }
      result.error = std::move(e);
      break;
    }
    builder.Take(event);
    const bool end = event.type == YAML_STREAM_END_EVENT;
    yaml_event_delete(&event);
    if (builder.error()) {
      result.error = builder.error();
      break;
    }
    if (end) break;
  }
  yaml_parser_delete(&parser);
  if (!result.error) result.document = std::move(document);
  return result;
}

std::optional<bool> AsBool(std::string_view text) {
  for (std::string_view yes : {"y", "yes", "true", "on"}) {
    if (FlexibleCaseEquals(text, yes)) return true;
  }
  for (std::string_view no : {"n", "no", "false", "off"}) {
    if (FlexibleCaseEquals(text, no)) return false;
  }
  return std::nullopt;
}

std::optional<double> AsNumber(std::string_view text) {
  // strtod reads more than YAML writes (hexadecimal, inf, nan, leading spaces): refused first.
  if (text.empty() || text.find_first_not_of("0123456789+-.eE") != std::string_view::npos) {
    return std::nullopt;
  }
  const std::string copy(text);
  char* end = nullptr;
  const double value = std::strtod(copy.c_str(), &end);
  if (end != copy.c_str() + copy.size() || !std::isfinite(value)) return std::nullopt;
  return value;
}

}  // namespace sluice::rules::yaml
