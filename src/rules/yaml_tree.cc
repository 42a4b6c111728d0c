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

// Builds the first document of a stream from libyaml's events.
class Builder {
 public:
  explicit Builder(Document* document) : document_(document) {}

  // Takes one event (not a stream or document event).
  void Take(const yaml_event_t& event) {
    if (done_) return;
    const Mark mark = MarkOf(event.start_mark);
    switch (event.type) {
      case YAML_SCALAR_EVENT: {
        const auto& s = event.data.scalar;
        std::string_view text(reinterpret_cast<const char*>(s.value), s.length);
        const std::string_view tag =
            s.tag != nullptr ? reinterpret_cast<const char*>(s.tag) : std::string_view();
        const bool quoted =
            s.style != YAML_PLAIN_SCALAR_STYLE || tag == "!" || tag == "tag:yaml.org,2002:str";
        Node node = !quoted && tag.empty() && IsNullText(text)
                        ? document_->Null(mark)
                        : document_->Scalar(std::string(text), quoted, mark);
        Anchor(s.anchor, node);
        Add(node);
        break;
      }
      case YAML_SEQUENCE_START_EVENT: {
        Node node = document_->Sequence(mark);
        Anchor(event.data.sequence_start.anchor, node);
        Add(node);
        open_.push_back({node, {}, false});
        break;
      }
      case YAML_MAPPING_START_EVENT: {
        Node node = document_->Map(mark);
        Anchor(event.data.mapping_start.anchor, node);
        Add(node);
        open_.push_back({node, {}, false});
        break;
      }
      case YAML_SEQUENCE_END_EVENT:
      case YAML_MAPPING_END_EVENT:
        open_.pop_back();
        break;
      case YAML_ALIAS_EVENT: {
        const auto it = anchors_.find(reinterpret_cast<const char*>(event.data.alias.anchor));
        Add(it != anchors_.end() ? it->second : document_->Null(mark));
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
  struct Open {
    Node node;
    Node key;      // a map's key waiting for its value
    bool has_key;  // (a key may itself be null)
  };

  void Anchor(const yaml_char_t* anchor, Node node) {
    if (anchor != nullptr) anchors_[reinterpret_cast<const char*>(anchor)] = node;
  }

  void Add(Node node) {
    if (open_.empty()) {
      document_->set_root(node);
      return;
    }
    Open& parent = open_.back();
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
  std::vector<Open> open_;
  absl::flat_hash_map<std::string, Node> anchors_;
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
