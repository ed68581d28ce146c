#include "grammar/json_schema.h"

#include <algorithm>
#include <bit>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <map>
#include <optional>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include "grammar/gbnf.h"
#include "grammar/number_range.h"
#include "grammar/regex_gbnf.h"

namespace kvasir::grammar {
namespace {

using json = nlohmann::ordered_json;

// Whitespace: `ws` between a structural token and a value (where pretty-printing breaks lines),
// `sp` around a member's colon.
constexpr const char* kBoundedWhitespace = R"(ws ::= | " " | "\n" " "{0,8} | "\n" "\t"{1,2}
sp ::= | " "
)";
constexpr const char* kAnyWhitespace = R"(ws ::= [ \t\n\r]*
sp ::= [ \t\n\r]*
)";

// The JSON primitives every schema grammar may use.
constexpr const char* kPrimitives = R"(string ::= "\"" string-body "\""
string-body ::= [^"\\\x00-\x1F]* ( "\\" ( ["\\/bfnrt] | "u" [0-9a-fA-F]{4} ) string-body )?
string-char ::= [^"\\\x00-\x1F] | "\\" ( ["\\/bfnrt] | "u" [0-9a-fA-F]{4} )
integer ::= "-"? ( "0" | [1-9] [0-9]{0,15} )
number ::= integer ( "." [0-9]{1,16} )? ( [eE] [-+]? [0-9]{1,2} )?
boolean ::= "true" | "false"
null ::= "null"
value ::= object | array | string | number | boolean | null
object ::= "{" ws ( member ( "," ws member )* )? "}"
member ::= string sp ":" sp value ws
array ::= "[" ws ( value ws ( "," ws value ws )* )? "]"
date ::= ( [1-9] [0-9]{3} | "0" ( [1-9] [0-9]{2} | "0" ( [1-9] [0-9] | "0" [1-9] ) ) ) "-" ( ( "0" [13578] | "1" [02] ) "-" ( "0" [1-9] | [12] [0-9] | "3" [01] ) | ( "0" [469] | "11" ) "-" ( "0" [1-9] | [12] [0-9] | "30" ) | "02-" ( "0" [1-9] | "1" [0-9] | "2" [0-8] ) )
time ::= ( [01] [0-9] | "2" [0-3] ) ":" [0-5] [0-9] ":" [0-5] [0-9] ( "." [0-9]{1,6} )? ( "Z" | [+-] ( [01] [0-9] | "2" [0-3] ) ":" [0-5] [0-9] )
date-time ::= date "T" time
uuid ::= [0-9a-f]{8} "-" [0-9a-f]{4} "-" [0-9a-f]{4} "-" [0-9a-f]{4} "-" [0-9a-f]{12}
)";

constexpr int kMaxDepth = 64;

const char* whitespace_rules(JsonWhitespace w) { return w == JsonWhitespace::any ? kAnyWhitespace : kBoundedWhitespace; }

const std::set<std::string, std::less<>> kAnnotations = {
    "title", "description", "default", "examples", "$schema", "$id", "$comment", "deprecated",
    "readOnly", "writeOnly", "$defs", "definitions", "strict", "discriminator"};
const std::set<std::string, std::less<>> kKeywords = {
    "type", "properties", "required", "additionalProperties", "items", "prefixItems", "minItems", "maxItems",
    "enum", "const", "anyOf", "oneOf", "allOf", "$ref", "minLength", "maxLength", "pattern", "format",
    "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf", "uniqueItems"};

}  // namespace

std::string gbnf_literal(std::string_view text) {
  std::string out = "\"";
  for (unsigned char c : text) {
    if (c == '"' || c == '\\') out += '\\', out += char(c);
    else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02X", c);
      out += buf;
    } else out += char(c);
  }
  return out + "\"";
}

namespace {

std::string sanitize(std::string_view hint) {
  std::string out;
  for (char c : hint) out += (std::isalnum(static_cast<unsigned char>(c)) || c == '-') ? c : '-';
  if (out.empty()) out = "schema";
  if (out.size() > 48) out.resize(48);
  return out;
}

}  // namespace

class SchemaGrammar::Converter {
 public:
  explicit Converter(JsonWhitespace whitespace) : whitespace_(whitespace) {}
  Result<std::string> add(const json& schema, const std::string& hint) {
    root_ = &schema;
    refs_.clear();  // a $ref resolves within its own schema
    index_definitions();
    // One budget for everything added to this grammar (a request's tools share it).
    if (steps_ == 0) deadline_ = std::chrono::steady_clock::now() + kSchemaMaxTime;
    const std::string rule = visit(schema, hint, 0);
    root_ = nullptr;
    definitions_.clear();
    if (error_) return *error_;
    return rule;
  }

  std::string gbnf(const std::string& root_body) const {
    std::string out = "root ::= " + root_body + "\n";
    for (const auto& [name, body] : rules_) out += name + " ::= " + body + "\n";
    return out + whitespace_rules(whitespace_) + kPrimitives;
  }

 private:
  void fail(std::string message) {
    if (!error_) error_ = Error{"json_schema: " + std::move(message), ErrorCode::invalid_argument};
  }

  // One unit of work; false (and the error, naming the limit) once the budget of steps or time is
  // spent. Every loop over schema nodes and every recursion charges it.
  bool step(size_t n = 1) {
    if (error_) return false;
    const size_t before = steps_;
    steps_ += n;
    if (steps_ > kSchemaMaxSteps)
      return fail("schema too large: compiling it takes more than " + std::to_string(kSchemaMaxSteps) +
                  " steps (nodes, $refs, oneOf branch pairs)"),
             false;
    if ((steps_ >> 8) != (before >> 8) && std::chrono::steady_clock::now() > deadline_)
      return fail("schema too large: compiling it takes more than " + std::to_string(kSchemaMaxTime.count()) + " ms"),
             false;
    return true;
  }
  bool branches(const json& list, const char* key, size_t limit = kSchemaMaxBranches) {
    if (list.is_array() && list.size() > limit)
      return fail("'" + std::string(key) + "' has " + std::to_string(list.size()) + " entries; at most " +
                  std::to_string(limit)),
             false;
    return true;
  }

  // A rule with this body (an existing one when the body repeats).
  std::string rule(const std::string& hint, const std::string& body) {
    if (auto it = by_body_.find(body); it != by_body_.end()) return it->second;
    std::string name = reserve(hint);
    define(name, body);
    return name;
  }
  std::string reserve(const std::string& hint) {
    std::string base = sanitize(hint), name = base;
    // Numbered from where this base left off: a hint used N times costs O(N), not O(N^2).
    int& next = next_number_.try_emplace(base, 2).first->second;
    while (taken_.count(name) || is_primitive(name)) name = base + "-" + std::to_string(next++);
    taken_.insert(name);
    if (taken_.size() > kSchemaMaxRules)
      fail("schema too large: its grammar needs more than " + std::to_string(kSchemaMaxRules) + " rules");
    return name;
  }
  void define(const std::string& name, const std::string& body) {
    by_body_[body] = name;
    push_rule(name, body);
  }
  void push_rule(const std::string& name, const std::string& body) {
    bytes_ += name.size() + body.size() + 6;
    if (bytes_ > kSchemaMaxGrammarBytes)
      fail("schema too large: its grammar passes " + std::to_string(kSchemaMaxGrammarBytes) + " bytes");
    if (!error_) rules_.push_back({name, body});
  }
  static bool is_primitive(const std::string& name) {
    static const std::set<std::string> p = {"root", "ws", "sp", "string", "string-body", "string-char", "integer", "number",
                                            "boolean", "null", "value", "object", "member", "array", "date", "time",
                                            "date-time", "uuid"};
    return p.count(name) > 0;
  }

  // "#/$defs/name" and "#/definitions/name" -> the schema, indexed once per add(): an ordered
  // object's lookup is a linear search.
  void index_definitions() {
    definitions_.clear();
    if (!root_->is_object()) return;
    for (const char* key : {"$defs", "definitions"}) {
      auto it = root_->find(key);
      if (it == root_->end() || !it->is_object()) continue;
      for (const auto& [name, schema] : it->items())
        definitions_.emplace("#/" + std::string(key) + "/" + name, &schema);
    }
  }
  const json* resolve(const std::string& ref) {
    if (!step()) return nullptr;
    if (ref == "#") return root_;
    auto it = definitions_.find(ref);
    return it == definitions_.end() ? nullptr : it->second;
  }

  std::string visit(const json& s, const std::string& hint, int depth) {
    if (!step()) return "value";
    if (depth > kMaxDepth) return fail("schema nested deeper than 64"), "value";
    if (s.is_boolean()) {
      if (!s.get<bool>()) fail("the schema 'false' admits nothing");
      return "value";
    }
    if (!s.is_object()) return fail("a schema must be an object or a boolean"), "value";
    for (const auto& [key, _] : s.items())
      if (!kKeywords.count(key) && !kAnnotations.count(key)) return fail("unsupported schema keyword '" + key + "'"), "value";
    if (s.contains("$ref")) {
      for (const auto& [k, _] : s.items())
        if (k != "$ref" && !kAnnotations.count(k)) return fail("'$ref' together with '" + k + "'"), "value";
      return visit_ref(s, depth);
    }
    // A keyword that constrains alongside an enumeration, a union or a reference would be ignored
    // by the branch below it, so it is refused rather than dropped (only `type` filters an enum).
    auto alone = [&](const char* key, std::initializer_list<const char*> allowed) {
      for (const auto& [k, _] : s.items()) {
        if (k == key || kAnnotations.count(k)) continue;
        bool ok = false;
        for (const char* a : allowed) ok = ok || k == a;
        if (!ok) return fail("'" + std::string(key) + "' together with '" + k + "'"), false;
      }
      return true;
    };
    if (s.contains("const") || s.contains("enum")) {
      const char* key = s.contains("const") ? "const" : "enum";
      if (!alone(key, {"type"})) return "value";
      const json values = s.contains("const") ? json::array({s["const"]}) : s["enum"];
      if (!values.is_array() || values.empty()) return fail("'enum' must be a non-empty array"), "value";
      if (!branches(values, key) || !step(values.size())) return "value";
      std::string body;
      for (const json& v : values)
        if (!s.contains("type") || (type_bits(v) & type_bits_of(s["type"])))
          body += (body.empty() ? "" : " | ") + gbnf_literal(v.dump(-1, ' ', false, json::error_handler_t::replace));
      if (body.empty()) return fail("no value of '" + std::string(key) + "' has the schema's 'type'"), "value";
      return rule(hint, body);
    }
    for (const char* key : {"anyOf", "oneOf"}) {
      if (!s.contains(key)) continue;
      const json& alts = s[key];
      if (!alts.is_array() || alts.empty()) return fail(std::string("'") + key + "' must be a non-empty array"), "value";
      if (!alone(key, {})) return "value";
      if (!branches(alts, key, std::string(key) == "oneOf" ? kSchemaMaxOneOf : kSchemaMaxBranches)) return "value";
      // oneOf means exactly one branch: as a union that is exact only when no value can satisfy two.
      if (std::string(key) == "oneOf" && !disjoint(alts, depth))
        return fail("'oneOf' whose branches may overlap (only disjoint types or a const discriminator; use anyOf)"),
               "value";
      std::string body;
      for (size_t i = 0; i < alts.size(); ++i)
        body += (i ? " | " : "") + visit(alts[i], hint + "-" + std::to_string(i), depth + 1);
      return rule(hint, body);
    }
    if (s.contains("allOf")) return visit(merge_all_of(s, depth), hint, depth + 1);
    if (s.contains("type") && s["type"].is_array()) {
      if (!branches(s["type"], "type", 8)) return "value";
      std::string body;
      for (const json& t : s["type"]) {
        json one = s;
        one["type"] = t;
        body += (body.empty() ? "" : " | ") + visit(one, hint + "-" + (t.is_string() ? t.get<std::string>() : "t"), depth + 1);
      }
      if (body.empty()) return fail("'type' must not be an empty list"), "value";
      return rule(hint, body);
    }
    std::string type;
    if (s.contains("type")) {
      if (!s["type"].is_string()) return fail("'type' must be a string or a list of strings"), "value";
      type = s["type"].get<std::string>();
    } else if (s.contains("properties") || s.contains("required") || s.contains("additionalProperties")) {
      type = "object";
    } else if (s.contains("items") || s.contains("prefixItems") || s.contains("minItems") || s.contains("maxItems")) {
      type = "array";
    } else if (s.contains("pattern") || s.contains("format") || s.contains("minLength") || s.contains("maxLength")) {
      type = "string";
    } else if (has_numeric_bounds(s)) {
      type = "number";
    } else {
      return "value";
    }
    if (type == "object") return visit_object(s, hint, depth);
    if (type == "array") return visit_array(s, hint, depth);
    if (type == "string") return visit_string(s, hint);
    if (type == "integer" || type == "number") return visit_number(s, hint, type == "integer");
    if (type == "boolean") return "boolean";
    if (type == "null") return "null";
    return fail("unknown type '" + type + "'"), "value";
  }

  std::string visit_ref(const json& s, int depth) {
    if (!s["$ref"].is_string()) return fail("'$ref' must be a string"), "value";
    const std::string ref = s["$ref"].get<std::string>();
    if (auto it = refs_.find(ref); it != refs_.end()) return it->second;
    const json* target = resolve(ref);
    if (!target) return fail("'$ref' " + ref + " does not resolve (only #, #/$defs/... and #/definitions/...)"), "value";
    // Named before it is visited, so that a recursive schema refers to itself.
    const std::string name = reserve("ref-" + ref.substr(ref.rfind('/') + 1));
    refs_[ref] = name;
    const std::string body = visit(*target, name + "-body", depth + 1);
    push_rule(name, body);
    return name;
  }

  // allOf over object schemas (the schema's own properties and required included): one object
  // with every property and every requirement. Refused where the merge would not be exact: a
  // part with another constraint, a property defined twice differently, additionalProperties.
  json merge_all_of(const json& s, int depth) {
    json merged = {{"type", "object"}, {"properties", json::object()}, {"required", json::array()}};
    std::vector<const json*> parts{&s};
    if (s["allOf"].is_array())
      for (const json& p : s["allOf"]) parts.push_back(&p);
    else
      fail("'allOf' must be an array");
    for (const json* part : parts) {
      if (part->is_object() && part->contains("$ref") && (*part)["$ref"].is_string() && part->size() == 1)
        part = resolve((*part)["$ref"].get<std::string>());
      if (!part || !part->is_object() || depth > kMaxDepth) {
        fail("'allOf' is supported only over object schemas");
        return json::object();
      }
      for (const auto& [k, v] : part->items()) {
        const bool ok = kAnnotations.count(k) || k == "properties" || k == "required" || (k == "allOf" && part == &s) ||
                        (k == "type" && v == "object");
        if (!ok) {
          fail("'allOf' over a schema with '" + k + "' (only object properties and required merge exactly)");
          return json::object();
        }
      }
      if (part->contains("properties") && (*part)["properties"].is_object())
        for (const auto& [k, v] : (*part)["properties"].items()) {
          if (!step(merged["properties"].size() / 64 + 1)) return json::object();  // an ordered object's lookup is linear
          if (merged["properties"].contains(k) && merged["properties"][k] != v) {
            fail("'allOf' defines property '" + k + "' twice");
            return json::object();
          }
          merged["properties"][k] = v;
        }
      if (part->contains("required") && (*part)["required"].is_array())
        for (const json& r : (*part)["required"]) merged["required"].push_back(r);
    }
    return merged;
  }

  // JSON types as bits: null 1, boolean 2, object 4, array 8, string 16, number (integer too) 32.
  static int type_bits(const json& v) {
    if (v.is_null()) return 1;
    if (v.is_boolean()) return 2;
    if (v.is_object()) return 4;
    if (v.is_array()) return 8;
    if (v.is_string()) return 16;
    return 32;
  }
  static int type_bits_of(const json& type) {
    if (type.is_array()) {
      int b = 0;
      for (const json& t : type) b |= type_bits_of(t);
      return b;
    }
    const std::string t = type.is_string() ? type.get<std::string>() : "";
    return t == "null" ? 1 : t == "boolean" ? 2 : t == "object" ? 4 : t == "array" ? 8 : t == "string" ? 16
         : (t == "number" || t == "integer") ? 32 : 63;
  }
  // The types a schema can admit, as bits (63: could be anything).
  int admits(const json& s, int depth) {
    if (depth > kMaxDepth || !step()) return 63;
    if (s.is_boolean()) return s.get<bool>() ? 63 : 0;
    if (!s.is_object()) return 63;
    if (s.contains("$ref") && s["$ref"].is_string()) {
      const json* t = resolve(s["$ref"].get<std::string>());
      return t ? admits(*t, depth + 1) : 63;
    }
    if (s.contains("const")) return type_bits(s["const"]);
    int bits = 63;
    if (s.contains("enum") && s["enum"].is_array()) {
      bits = 0;
      for (const json& v : s["enum"]) bits |= type_bits(v);
    }
    if (s.contains("type")) bits &= type_bits_of(s["type"]);
    for (const char* key : {"anyOf", "oneOf"})
      if (s.contains(key) && s[key].is_array()) {
        int u = 0;
        for (const json& b : s[key]) u |= admits(b, depth + 1);
        bits &= u;
      }
    return bits;
  }
  // A required property whose schema is one constant (a tagged union's tag), or none.
  std::optional<std::pair<std::string, json>> tag(const json& s) {
    if (!s.is_object() || !s.contains("properties") || !s["properties"].is_object() || !s.contains("required")) return {};
    for (const auto& [k, v] : s["properties"].items()) {
      const bool req = s["required"].is_array() && std::find(s["required"].begin(), s["required"].end(), k) != s["required"].end();
      if (!req || !v.is_object()) continue;
      if (v.contains("const")) return std::pair{k, v["const"]};
      if (v.contains("enum") && v["enum"].is_array() && v["enum"].size() == 1) return std::pair{k, v["enum"][0]};
    }
    return {};
  }
  const json& deref(const json& s) {
    if (s.is_object() && s.contains("$ref") && s["$ref"].is_string())
      if (const json* t = resolve(s["$ref"].get<std::string>())) return *t;
    return s;
  }
  bool disjoint(const json& alts, int depth) {
    for (size_t i = 0; i < alts.size(); ++i)
      for (size_t j = i + 1; j < alts.size(); ++j) {
        if (!step()) return true;  // the error is set; the verdict no longer matters
        if (!(admits(alts[i], depth) & admits(alts[j], depth))) continue;
        auto a = tag(deref(alts[i])), b = tag(deref(alts[j]));
        if (a && b && a->first == b->first && a->second != b->second) continue;
        return false;
      }
    return true;
  }

  std::string visit_object(const json& s, const std::string& hint, int depth) {
    const json empty = json::object();
    const json& props = s.contains("properties") ? s["properties"] : empty;
    if (!props.is_object()) return fail("'properties' must be an object"), "value";
    std::vector<std::string> required;
    std::unordered_set<std::string> is_required;
    if (s.contains("required")) {
      if (!s["required"].is_array()) return fail("'required' must be an array"), "value";
      if (!step(s["required"].size())) return "value";
      for (const json& r : s["required"]) {
        if (!r.is_string()) return fail("'required' must list strings"), "value";
        if (is_required.insert(r.get<std::string>()).second) required.push_back(r.get<std::string>());
      }
    }
    if (props.empty() && required.empty()) {
      if (!s.contains("additionalProperties") || s["additionalProperties"] == true) return "object";
      if (s["additionalProperties"] == false) return rule(hint, "\"{\" ws \"}\"");
      const std::string v = visit(s["additionalProperties"], hint + "-value", depth + 1);
      const std::string m = rule(hint + "-member", "string sp \":\" sp " + v + " ws");
      return rule(hint, "\"{\" ws ( " + m + " ( \",\" ws " + m + " )* )? \"}\"");
    }
    auto member = [&](const std::string& key, const json& schema) {
      const std::string key_json = json(key).dump(-1, ' ', false, json::error_handler_t::replace);
      const std::string v = visit(schema, hint + "-" + key, depth + 1);
      return rule(hint + "-" + key + "-kv", gbnf_literal(key_json) + " sp \":\" sp " + v + " ws");
    };
    std::vector<std::string> req, opt;
    std::unordered_set<std::string> defined;
    for (const auto& [key, schema] : props.items()) {
      if (error_) return "value";
      defined.insert(key);
      (is_required.count(key) ? req : opt).push_back(member(key, schema));
    }
    for (const std::string& r : required)
      if (!defined.count(r)) req.push_back(member(r, json(true)));
    if (opt.size() > kSchemaMaxOptionalProperties)
      return fail("an object with " + std::to_string(opt.size()) + " optional properties; at most " +
                  std::to_string(kSchemaMaxOptionalProperties) + " (any of them may follow any earlier one)"),
             "value";
    std::string body = "\"{\" ws ";
    for (size_t i = 0; i < req.size(); ++i) body += (i ? "\",\" ws " : "") + req[i] + " ";
    if (!req.empty()) {
      for (const std::string& o : opt) body += "( \",\" ws " + o + " )? ";
    } else if (!opt.empty()) {
      // Optional members only, in order, each at most once: the first present one, then the
      // rest of the list, each member optional: first ::= o_0 tail_1 | o_1 tail_2 | ... | o_{n-1}
      // with tail_i ::= ( "," o_i )? tail_{i+1}. Linear in n (spelling out each start's tail
      // instead would be quadratic).
      std::vector<std::string> tail(opt.size() + 1);
      for (size_t i = opt.size(); i-- > 1 && !error_;)
        tail[i] = rule(hint + "-tail", "( \",\" ws " + opt[i] + " )?" + (tail[i + 1].empty() ? "" : " " + tail[i + 1]));
      std::string first;
      for (size_t i = 0; i < opt.size(); ++i)
        first += (i ? " | " : "") + opt[i] + (tail[i + 1].empty() ? "" : " " + tail[i + 1]);
      body += "( " + first + " )? ";
    }
    return rule(hint, body + "\"}\"");
  }

  std::optional<int64_t> count(const json& s, const char* key) {
    if (!s.contains(key)) return std::nullopt;
    if (!s[key].is_number_unsigned() && !(s[key].is_number_integer() && s[key].get<int64_t>() >= 0)) {
      fail(std::string("'") + key + "' must be a non-negative integer");
      return std::nullopt;
    }
    const int64_t v = s[key].get<int64_t>();
    if (v > 10000) fail(std::string("'") + key + "' over 10000");
    return v;
  }

  // "x{m,n}" in GBNF, with n < 0 for no bound.
  static std::string repeat(const std::string& x, int64_t m, int64_t n) {
    if (n < 0) return "( " + x + " ){" + std::to_string(m) + ",}";
    return "( " + x + " ){" + std::to_string(m) + "," + std::to_string(n) + "}";
  }

  std::string visit_array(const json& s, const std::string& hint, int depth) {
    const int64_t min = count(s, "minItems").value_or(0);
    const int64_t max = s.contains("maxItems") ? count(s, "maxItems").value_or(0) : -1;
    if (error_) return "value";
    if (max >= 0 && max < min) return fail("'maxItems' below 'minItems'"), "value";
    if (s.contains("uniqueItems") && s["uniqueItems"] == true) return unique_array(s, hint, min, max);
    std::vector<std::string> prefix;
    if (s.contains("prefixItems")) {
      if (!s["prefixItems"].is_array()) return fail("'prefixItems' must be an array"), "value";
      for (size_t i = 0; i < s["prefixItems"].size(); ++i)
        prefix.push_back(visit(s["prefixItems"][i], hint + "-" + std::to_string(i), depth + 1));
    }
    std::string item = "value";
    const bool items_false = s.contains("items") && s["items"] == false;
    if (s.contains("items") && !items_false) item = visit(s["items"], hint + "-item", depth + 1);
    if (!prefix.empty()) {
      if (max >= 0 && int64_t(prefix.size()) > max) return fail("'prefixItems' longer than 'maxItems'"), "value";
      if (min > int64_t(prefix.size()) && items_false) return fail("'minItems' needs items past 'prefixItems'"), "value";
      std::string body = "\"[\" ws ";
      for (size_t i = 0; i < prefix.size(); ++i) body += (i ? "\",\" ws " : "") + prefix[i] + " ws ";
      const int64_t extra = std::max<int64_t>(0, min - int64_t(prefix.size()));
      if (extra > 0) body += repeat("\",\" ws " + item + " ws", extra, extra) + " ";
      return rule(hint, body + "\"]\"");
    }
    if (items_false) {
      if (min > 0) return fail("'minItems' with 'items': false"), "value";
      return rule(hint, "\"[\" ws \"]\"");
    }
    const std::string more = "\",\" ws " + item + " ws";
    if (min == 0) {
      if (max == 0) return rule(hint, "\"[\" ws \"]\"");
      const std::string tail = max < 0 ? "( " + more + " )*" : repeat(more, 0, max - 1);
      return rule(hint, "\"[\" ws ( " + item + " ws " + tail + " )? \"]\"");
    }
    return rule(hint, "\"[\" ws " + item + " ws " + repeat(more, min - 1, max < 0 ? -1 : max - 1) + " \"]\"");
  }

  // uniqueItems over an enum of at most kMaxUniqueValues values (or booleans): one rule per set
  // of values written so far, each continuing with a value not in it, so that no value repeats.
  static constexpr size_t kMaxUniqueValues = 8;
  std::string unique_array(const json& s, const std::string& hint, int64_t min, int64_t max) {
    auto refuse = [&] {
      return fail("'uniqueItems' (only over 'items' that is an enum or const of at most 8 values, or booleans, "
                  "without 'prefixItems')"),
             std::string("value");
    };
    if (s.contains("prefixItems") || !s.contains("items") || !s["items"].is_object()) return refuse();
    const json& items = s["items"];
    json values;
    if (items.contains("enum")) values = items["enum"];
    else if (items.contains("const")) values = json::array({items["const"]});
    else if (items.size() == 1 && items.value("type", "") == "boolean") values = json::array({true, false});
    else return refuse();
    for (const auto& [k, _] : items.items())
      if (k != "enum" && k != "const" && k != "type" && k != "description" && k != "title") return refuse();
    std::vector<std::string> lits;
    for (const json& v : values) {
      if (items.contains("type") && !(type_bits(v) & type_bits_of(items["type"]))) continue;
      const std::string lit = gbnf_literal(v.dump(-1, ' ', false, json::error_handler_t::replace));
      if (std::find(lits.begin(), lits.end(), lit) == lits.end()) lits.push_back(lit);
    }
    if (lits.empty() || lits.size() > kMaxUniqueValues) return refuse();
    const int64_t n = int64_t(lits.size());
    if (min > n) return fail("'minItems' above the number of distinct values 'uniqueItems' allows"), "value";
    const int64_t cap = max < 0 ? n : std::min(max, n);
    // After the set `used` (a bitmask): "]" when enough were written, or "," and an unused value.
    std::vector<std::string> after(size_t(1) << n);
    for (uint32_t used = uint32_t(after.size()); used-- > 0;) {
      const int64_t k = std::popcount(used);
      if (k > cap) continue;
      std::string body = k >= min ? "\"]\"" : "";
      if (k < cap)
        for (int64_t i = 0; i < n; ++i)
          if (!(used & (1u << i)))
            body += (body.empty() ? "" : " | ") + std::string("\",\" ws ") + lits[size_t(i)] + " ws " +
                    after[used | (1u << i)];
      after[used] = body.empty() ? "" : rule(hint + "-u" + std::to_string(used), body);
    }
    std::string first = min == 0 ? "\"]\"" : "";
    for (int64_t i = 0; i < n && cap > 0; ++i)
      first += (first.empty() ? "" : " | ") + lits[size_t(i)] + " ws " + after[1u << i];
    return rule(hint, "\"[\" ws ( " + first + " )");
  }

  std::string visit_string(const json& s, const std::string& hint) {
    if (s.contains("format")) {
      if (!s["format"].is_string()) return fail("'format' must be a string"), "value";
      const std::string f = s["format"].get<std::string>();
      if (s.contains("pattern") || s.contains("minLength") || s.contains("maxLength"))
        return fail("'format' together with 'pattern' or a length"), "value";
      const std::string body = format_rule(f);
      if (body.empty())
        return fail("unsupported string format '" + f + "' (date, time, date-time, uuid, email, uri, ipv4)"), "value";
      return rule(hint, "\"\\\"\" " + body + " \"\\\"\"");
    }
    if (s.contains("pattern")) {
      if (!s["pattern"].is_string()) return fail("'pattern' must be a string"), "value";
      if (s.contains("minLength") || s.contains("maxLength")) return fail("'pattern' together with a length"), "value";
      auto body = regex_to_gbnf(s["pattern"].get<std::string>());
      if (!body) return fail(body.error()), "value";
      return rule(hint, "\"\\\"\" ( " + *body + " ) \"\\\"\"");
    }
    if (s.contains("minLength") || s.contains("maxLength")) {
      const int64_t min = count(s, "minLength").value_or(0);
      const int64_t max = s.contains("maxLength") ? count(s, "maxLength").value_or(0) : -1;
      if (error_) return "value";
      if (max >= 0 && max < min) return fail("'maxLength' below 'minLength'"), "value";
      return rule(hint, "\"\\\"\" " + repeat("string-char", min, max) + " \"\\\"\"");
    }
    return "string";
  }

  // The rule for a string format's text (without its quotes), made once; empty: not supported.
  // email: RFC 5321's dot-atom local part @ a host name; uri: RFC 3986 with a scheme (host a name
  // or an IPv4 address, no IP literals); ipv4: four decimal octets without leading zeros.
  std::string format_rule(const std::string& f) {
    if (f == "date" || f == "time" || f == "date-time" || f == "uuid") return f;
    if (f == "ipv4") {
      const std::string octet = rule("ipv4-octet", "\"25\" [0-5] | \"2\" [0-4] [0-9] | \"1\" [0-9] [0-9] | [1-9] [0-9] | [0-9]");
      return rule("format-ipv4", octet + " \".\" " + octet + " \".\" " + octet + " \".\" " + octet);
    }
    if (f == "email") {  // unambiguous runs (a bounded count would multiply the matcher's parses)
      const std::string atom = rule("email-atom", "[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+");
      const std::string label = rule("host-label", "[A-Za-z0-9]+ ( \"-\"+ [A-Za-z0-9]+ )*");
      return rule("format-email", atom + " ( \".\" " + atom + " )* \"@\" " + label + " ( \".\" " + label + " )+");
    }
    if (f == "uri") {
      const std::string pct = "\"%\" [0-9A-Fa-f] [0-9A-Fa-f]";
      const std::string pchar = rule("uri-pchar", "[A-Za-z0-9._~!$&'()*+,;=:@-] | " + pct);
      const std::string segment = rule("uri-segment", "( " + pchar + " )*");
      const std::string path = rule("uri-path", "( \"/\" " + segment + " )*");
      const std::string nz = rule("uri-segment-nz", "( " + pchar + " )+");
      const std::string host = rule("uri-host", "( [A-Za-z0-9._~!$&'()*+,;=-] | " + pct + " )*");
      const std::string user = rule("uri-userinfo", "( [A-Za-z0-9._~!$&'()*+,;=:-] | " + pct + " )*");
      const std::string authority = rule("uri-authority", "( " + user + " \"@\" )? " + host + " ( \":\" [0-9]{0,5} )?");
      const std::string hier = rule("uri-hier", "| \"//\" " + authority + " " + path + " | \"/\" ( " + nz + " " + path +
                                                    " )? | " + nz + " " + path);
      const std::string tail = rule("uri-query", "( " + pchar + " | [/?] )*");
      return rule("format-uri", "[A-Za-z] [A-Za-z0-9+.-]{0,31} \":\" " + hier + " ( \"?\" " + tail + " )? ( \"#\" " + tail + " )?");
    }
    return "";
  }

  std::string visit_number(const json& s, const std::string& hint, bool integer) {
    if (!has_numeric_bounds(s)) return integer ? "integer" : "number";
    auto body = numeric_range_gbnf(s, integer, hint, [this](const std::string& h, const std::string& b) { return rule(h, b); });
    if (!body) return fail(body.error()), "value";
    return rule(hint, *body);
  }

  const JsonWhitespace whitespace_;
  const json* root_ = nullptr;
  std::vector<std::pair<std::string, std::string>> rules_;
  std::map<std::string, std::string> by_body_;
  std::set<std::string> taken_;
  std::map<std::string, std::string> refs_;
  std::optional<Error> error_;
  std::unordered_map<std::string, const json*> definitions_;  // "#/$defs/x" -> its schema
  std::unordered_map<std::string, int> next_number_;  // per rule-name base: the next suffix to try
  size_t steps_ = 0;  // work done (step()), over every add()
  size_t bytes_ = 0;  // grammar text so far
  std::chrono::steady_clock::time_point deadline_;
};

SchemaGrammar::SchemaGrammar(JsonWhitespace whitespace) : c_(std::make_unique<Converter>(whitespace)) {}
SchemaGrammar::~SchemaGrammar() = default;
Result<std::string> SchemaGrammar::add(const nlohmann::ordered_json& schema, const std::string& hint) {
  return c_->add(schema, hint);
}
std::string SchemaGrammar::gbnf(const std::string& root_body) const { return c_->gbnf(root_body); }

Result<std::string> json_schema_to_gbnf(const nlohmann::ordered_json& schema, JsonWhitespace whitespace) {
  SchemaGrammar g(whitespace);
  auto top = g.add(schema, "root-value");
  if (!top) return Error{top.error(), top.error_code()};
  return g.gbnf("ws " + *top + " ws");
}

Result<Grammar> compile_json_schema(const nlohmann::ordered_json& schema, JsonWhitespace whitespace) {
  auto text = json_schema_to_gbnf(schema, whitespace);
  if (!text) return Error{text.error(), text.error_code()};
  return parse_gbnf(*text);
}

std::string json_object_gbnf(JsonWhitespace whitespace) {
  return std::string("root ::= ws object ws\n") + whitespace_rules(whitespace) + kPrimitives;
}

}  // namespace kvasir::grammar
