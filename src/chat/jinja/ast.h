// The syntax tree the parser builds and the interpreter walks. Nodes are "fat" structs: each kind
// uses the fields its comment names and leaves the rest empty.
#pragma once
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "chat/jinja/value.h"

namespace kvasir::jinja {

using FilterFn = Value (*)(Interpreter& in, const Value& subject, CallArgs& args);
using TestFn = bool (*)(Interpreter& in, const Value& subject, CallArgs& args);

enum class ExprKind : uint8_t {
  kConst,     // value
  kName,      // name
  kList,      // items
  kTuple,     // items
  kDict,      // items: key, value, key, value, ...
  kGetattr,   // a.name; value is true when it is a namespace assignment target ({% set ns.x = ... %})
  kGetitem,   // a[b]
  kSlice,     // a:b:c inside [], any of them null
  kCall,      // a(items..., kwargs..., *dyn_args, **dyn_kwargs)
  kFilter,    // a|name(items..., kwargs...); a is null in filter blocks and {% set x | f %}
  kTest,      // a is name(items..., kwargs...)
  kNeg, kPos, kNot,  // a
  kAnd, kOr,         // a, b
  kBinary,    // a op b
  kConcat,    // items joined with ~
  kCompare,   // a, then comparisons
  kCondExpr,  // a if b else c (c may be null)
};

enum class BinOp : uint8_t { kAdd, kSub, kMul, kDiv, kFloorDiv, kMod, kPow };
enum class CmpOp : uint8_t { kEq, kNe, kLt, kLe, kGt, kGe, kIn, kNotIn };

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  ExprKind kind = ExprKind::kConst;
  int line = 0, column = 0;
  int depth = 1;  // height of this subtree; the parser bounds it
  Value value;
  std::string name;
  BinOp op = BinOp::kAdd;
  ExprPtr a, b, c;
  std::vector<ExprPtr> items;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  ExprPtr dyn_args, dyn_kwargs;
  std::vector<std::pair<CmpOp, ExprPtr>> comparisons;
  FilterFn filter = nullptr;  // kFilter: resolved at parse time; null if unknown (fails when evaluated)
  TestFn test = nullptr;      // kTest: likewise
};

enum class StmtKind : uint8_t {
  kData,         // text
  kPrint,        // {{ expr }}
  kIf,           // branches (condition, body)..., else_body
  kFor,          // for target in expr [if cond] [recursive]: body, else_body
  kSet,          // set target = expr
  kSetBlock,     // set target [| filter]: body
  kMacro,        // macro name(params=defaults): body
  kCallBlock,    // call(params) expr: body
  kFilterBlock,  // filter filter: body
  kWith,         // with targets = values: body
  kBreak, kContinue,
  kBody,         // a body in its own scope ({% generation %} renders its content as is)
};

struct Stmt;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

struct Stmt {
  StmtKind kind = StmtKind::kData;
  int line = 0, column = 0;
  std::string text;    // kData
  ExprPtr expr;        // kPrint, kFor (iterable), kSet (value), kCallBlock (the call)
  ExprPtr target;      // kFor, kSet, kSetBlock: a Name, a Tuple of targets, or a Getattr on a Name (ns.x)
  ExprPtr cond;        // kFor: the inline `if`
  ExprPtr filter;      // kSetBlock (may be null), kFilterBlock: a kFilter chain with a null innermost subject
  std::vector<std::pair<ExprPtr, Body>> branches;  // kIf
  Body body, else_body;
  bool recursive = false;  // kFor
  // kMacro, kCallBlock
  std::string name;
  std::vector<std::string> params;
  std::vector<ExprPtr> defaults;  // for the last defaults.size() params
  bool uses_varargs = false, uses_kwargs = false, uses_caller = false;
  // kWith
  std::vector<ExprPtr> targets, values;
};

}  // namespace kvasir::jinja
