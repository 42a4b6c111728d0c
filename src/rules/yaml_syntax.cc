#include "rules/yaml_syntax.h"

#include <yaml.h>

#include "fmt/format.h"

namespace sluice::rules {

std::optional<YamlSyntaxError> FindYamlSyntaxError(std::string_view text) {
  yaml_parser_t parser;
  if (yaml_parser_initialize(&parser) == 0) return std::nullopt;  // out of memory: yaml-cpp decides
  yaml_parser_set_input_string(&parser, reinterpret_cast<const unsigned char*>(text.data()),
                               text.size());
  std::optional<YamlSyntaxError> error;
  for (;;) {
    yaml_event_t event;
    if (yaml_parser_parse(&parser, &event) == 0) {
      YamlSyntaxError e;
      e.line = static_cast<int>(parser.problem_mark.line) + 1;
      e.column = static_cast<int>(parser.problem_mark.column) + 1;
      e.message = parser.problem != nullptr ? parser.problem : "malformed YAML";
      if (parser.context != nullptr) {
        e.message += fmt::format(" ({} at {}:{})", parser.context, parser.context_mark.line + 1,
                                 parser.context_mark.column + 1);
      }
      error = std::move(e);
      break;
    }
    const bool end = event.type == YAML_STREAM_END_EVENT;
    yaml_event_delete(&event);
    if (end) break;
  }
  yaml_parser_delete(&parser);
  return error;
}

}  // namespace sluice::rules
