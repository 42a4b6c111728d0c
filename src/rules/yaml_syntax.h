// A YAML syntax check by libyaml, before yaml-cpp builds the tree.
//
// yaml-cpp 0.7 accepts some malformed documents: a quoted scalar left open at the end of the
// file (`domain: 'abc` then a newline, or `'''`) loads as a string or null instead of failing.
// libyaml, the parser that envoyproxy/ratelimit's go-yaml is a port of, rejects them; so every
// file goes through its parser first (events only, no tree), and what it rejects is a syntax
// error at the position libyaml names.

#ifndef SLUICE_RULES_YAML_SYNTAX_H_
#define SLUICE_RULES_YAML_SYNTAX_H_

#include <optional>
#include <string>
#include <string_view>

namespace sluice::rules {

struct YamlSyntaxError {
  int line = 0;         // 1-based
  int column = 0;       // 1-based
  std::string message;  // libyaml's problem, and its context ("while scanning ... at 1:8")
};

// The first syntax error in `text`, or nullopt when libyaml parses it to the end.
std::optional<YamlSyntaxError> FindYamlSyntaxError(std::string_view text);

}  // namespace sluice::rules

#endif  // SLUICE_RULES_YAML_SYNTAX_H_
