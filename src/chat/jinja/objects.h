// The objects templates see besides plain data: namespace(), the loop variable, macros, builtin
// functions, bound methods, cycler() and joiner().
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "chat/jinja/interpreter.h"
#include "chat/jinja/value.h"

namespace kvasir::jinja {

class Namespace : public Object {
 public:
  std::string type_name() const override { return "Namespace"; }
  void repr(Printer& p, int depth) const override;
  std::optional<Value> get_attr(Interpreter& in, std::string_view name) override;
  bool is_namespace() const override { return true; }
  void set_attr(std::string_view name, Value v) override;

 private:
  std::vector<std::pair<std::string, Value>> attrs_;
};

class LoopContext : public Object {
 public:
  LoopContext(std::shared_ptr<const std::vector<Value>> items, int depth0, const Stmt* loop, ScopePtr scope)
      : items_(std::move(items)), depth0_(depth0), loop_(loop), scope_(std::move(scope)) {}
  void advance(size_t index0) { index0_ = index0; }

  std::string type_name() const override { return "LoopContext"; }
  void repr(Printer& p, int depth) const override;
  std::optional<Value> get_attr(Interpreter& in, std::string_view name) override;
  std::optional<Value> call_method(Interpreter& in, std::string_view name, CallArgs& args) override;
  bool callable() const override { return true; }
  Value call(Interpreter& in, CallArgs& args) override;  // loop(children) in a recursive loop

 private:
  std::shared_ptr<const std::vector<Value>> items_;
  size_t index0_ = 0;
  int depth0_;
  const Stmt* loop_;
  ScopePtr scope_;
  std::optional<Value> last_changed_;
};

class Macro : public Object {
 public:
  Macro(const Stmt* def, ScopePtr closure, std::string name)
      : def_(def), closure_(std::move(closure)), name_(std::move(name)) {}
  const Stmt& def() const { return *def_; }
  const ScopePtr& closure() const { return closure_; }
  const std::string& name() const { return name_; }

  std::string type_name() const override { return "Macro"; }
  void repr(Printer& p, int depth) const override;
  std::optional<Value> get_attr(Interpreter& in, std::string_view name) override;
  bool callable() const override { return true; }
  Value call(Interpreter& in, CallArgs& args) override;

 private:
  const Stmt* def_;
  ScopePtr closure_;
  std::string name_;
};

// A method looked up but not (yet) called: "abc".upper, loop.cycle.
class BoundMethod : public Object {
 public:
  BoundMethod(Value self, std::string name) : self_(std::move(self)), name_(std::move(name)) {}
  std::string type_name() const override { return "builtin_function_or_method"; }
  void repr(Printer& p, int depth) const override;
  bool callable() const override { return true; }
  Value call(Interpreter& in, CallArgs& args) override;

 private:
  std::string type_name_of_self() const;
  Value self_;
  std::string name_;
};

class BuiltinFunction : public Object {
 public:
  using Fn = Value (*)(Interpreter& in, CallArgs& args);
  BuiltinFunction(std::string name, Fn fn) : name_(std::move(name)), fn_(fn) {}
  std::string type_name() const override { return "function"; }
  void repr(Printer& p, int depth) const override;
  bool callable() const override { return true; }
  Value call(Interpreter& in, CallArgs& args) override { return fn_(in, args); }

 private:
  std::string name_;
  Fn fn_;
};

// The globals every template sees: range, dict, namespace, cycler, joiner, raise_exception, strftime_now.
std::vector<std::pair<std::string, Value>> make_builtins(Interpreter& in);

}  // namespace kvasir::jinja
