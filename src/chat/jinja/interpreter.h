// Walks the syntax tree: scopes, statements, expressions, calls. Filters, tests, methods and the
// builtin objects call back into it for attribute access, calls and the resource budget.
#pragma once
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "chat/jinja/ast.h"
#include "chat/jinja/config.h"
#include "chat/jinja/value.h"

namespace kvasir::jinja {

// Variables of one frame; lookups walk the parents. Frames are shared because macros and loop
// objects keep the frame they were made in.
class Scope {
 public:
  explicit Scope(std::shared_ptr<Scope> parent = nullptr) : parent_(std::move(parent)) {}
  const Value* find(std::string_view name) const;
  void set(std::string_view name, Value v);
  void clear() { vars_.clear(); }

 private:
  std::shared_ptr<Scope> parent_;
  std::vector<std::pair<std::string, Value>> vars_;
};
using ScopePtr = std::shared_ptr<Scope>;

class Macro;

class Interpreter {
 public:
  explicit Interpreter(const RenderConfig& config);
  ~Interpreter();
  Interpreter(const Interpreter&) = delete;
  Interpreter& operator=(const Interpreter&) = delete;

  // Renders a parsed template with the given top-level variables.
  std::string render(const Body& body, const ScopePtr& globals);

  // ----- services for filters, tests, methods and objects -----
  Value eval(const Expr& e, const ScopePtr& scope);
  Value get_attr(const Value& obj, std::string_view name);   // obj.name, sandboxed
  Value get_item(const Value& obj, const Value& key);        // obj[key], sandboxed
  Value call(const Value& callee, CallArgs& args);
  Value call_filter(const std::string& name, const Value& subject, CallArgs& args);
  bool call_test(const std::string& name, const Value& subject, CallArgs& args);
  Value call_macro(const Macro& macro, CallArgs& args);
  Value call_loop(const Stmt& loop, const ScopePtr& scope, const Value& iterable, int depth0);

  std::string str(const Value& v);   // str(v) under the output limit
  std::string repr(const Value& v);
  Value make_string(std::string s);  // checks the size limit and charges the bytes
  void charge(uint64_t steps);
  void charge_bytes(size_t n) { charge(n / 16); }
  void check_size(size_t n) const;   // a string of n bytes would break the output limit → throws
  const RenderConfig& config() const { return config_; }
  const Limits& limits() const { return config_.limits; }

  template <class T, class... Args>
  T* make(Args&&... args) {
    auto obj = std::make_unique<T>(std::forward<Args>(args)...);
    T* raw = obj.get();
    adopt(std::move(obj));
    return raw;
  }

 private:
  enum class Flow { kNormal, kBreak, kContinue };
  struct DepthGuard;

  void adopt(std::unique_ptr<Object> obj);
  Flow exec_body(const Body& body, const ScopePtr& scope, std::string& out);
  Flow exec(const Stmt& s, const ScopePtr& scope, std::string& out);
  Flow exec_for(const Stmt& s, const ScopePtr& scope, std::string& out);
  Flow run_loop(const Stmt& s, const ScopePtr& scope, std::vector<Value> items, int depth0, std::string& out);
  void exec_call_block(const Stmt& s, const ScopePtr& scope, std::string& out);
  Flow capture(const Body& body, const ScopePtr& parent, std::string& out);  // body in a child scope
  void assign(const Expr& target, const Value& v, const ScopePtr& scope);
  void emit(std::string& out, std::string_view s);

  Value eval_inner(const Expr& e, const ScopePtr& scope);
  Value eval_name(const Expr& e, const ScopePtr& scope);
  Value eval_call(const Expr& e, const ScopePtr& scope);
  Value eval_filter(const Expr& e, const ScopePtr& scope, const Value* block_subject);
  Value eval_test(const Expr& e, const ScopePtr& scope);
  Value eval_compare(const Expr& e, const ScopePtr& scope);
  Value eval_slice(const Value& obj, const Expr& slice, const ScopePtr& scope);
  void eval_args(const Expr& e, const ScopePtr& scope, CallArgs& out);

  RenderConfig config_;
  uint64_t steps_ = 0;
  int depth_ = 0;
  int call_depth_ = 0;
  std::vector<std::unique_ptr<Object>> arena_;
  std::vector<std::pair<std::string, Value>> builtins_;
};

}  // namespace kvasir::jinja
