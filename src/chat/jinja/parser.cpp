#include "chat/jinja/parser.h"

#include <algorithm>
#include <initializer_list>

#include "chat/jinja/analysis.h"
#include "chat/jinja/error.h"
#include "chat/jinja/filters.h"
#include "chat/jinja/lexer.h"

namespace kvasir::jinja {

namespace {

using Names = std::initializer_list<std::string_view>;

std::string describe(const Token& t) {
  switch (t.type) {
    case Tok::kData: return "template data";
    case Tok::kVariableBegin: return "begin of print statement";
    case Tok::kVariableEnd: return "end of print statement";
    case Tok::kBlockBegin: return "begin of statement block";
    case Tok::kBlockEnd: return "end of statement block";
    case Tok::kName: return t.text;
    case Tok::kString: return "string";
    case Tok::kInteger: return "integer";
    case Tok::kFloat: return "float";
    case Tok::kOperator: return t.text;
    case Tok::kEof: return "end of template";
  }
  return "token";
}

bool contains(Names names, std::string_view s) { return std::find(names.begin(), names.end(), s) != names.end(); }

std::string quoted_list(Names names) {
  std::string s;
  for (auto n : names) s += (s.empty() ? "'" : " or '") + std::string(n) + "'";
  return s;
}

class Parser {
 public:
  Parser(std::vector<Token> tokens, int max_nesting) : toks_(std::move(tokens)), max_nesting_(max_nesting) {}

  Body parse_template() {
    Body body = subparse(nullptr);
    check_filter_and_test_names(body);
    return body;
  }

 private:
  // ----- token stream -----
  const Token& cur() const { return toks_[pos_]; }
  const Token& peek(size_t k = 1) const { return toks_[std::min(pos_ + k, toks_.size() - 1)]; }
  const Token& next() {
    const Token& t = toks_[pos_];
    if (pos_ + 1 < toks_.size()) ++pos_;
    return t;
  }
  bool at_op(std::string_view op) const { return cur().is_op(op); }
  bool at_name(std::string_view n) const { return cur().is_name(n); }
  bool skip_op(std::string_view op) {
    if (!at_op(op)) return false;
    next();
    return true;
  }
  bool skip_name(std::string_view n) {
    if (!at_name(n)) return false;
    next();
    return true;
  }
  [[noreturn]] void fail_at(const Token& t, std::string msg, const char* type = "TemplateSyntaxError") const {
    throw JinjaError{type, std::move(msg), t.line, t.column};
  }
  const Token& expect_op(std::string_view op) {
    if (!at_op(op)) fail_at(cur(), "expected token '" + std::string(op) + "', got '" + describe(cur()) + "'");
    return next();
  }
  const Token& expect(Tok type, const char* what) {
    if (cur().type != type) fail_at(cur(), std::string("expected token '") + what + "', got '" + describe(cur()) + "'");
    return next();
  }
  const Token& expect_name() { return expect(Tok::kName, "name"); }
  void expect_name(std::string_view n) {
    if (!at_name(n)) fail_at(cur(), "expected token '" + std::string(n) + "', got '" + describe(cur()) + "'");
    next();
  }

  // Bounds recursion: nested blocks, brackets, unary chains.
  struct Nest {
    Parser& p;
    explicit Nest(Parser& parser) : p(parser) {
      if (++p.nesting_ > p.max_nesting_) {
        p.fail_at(p.cur(), "template nested too deeply (more than " + std::to_string(p.max_nesting_) + " levels)");
      }
    }
    ~Nest() { --p.nesting_; }
  };

  ExprPtr node(ExprKind kind, const Token& at) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->line = at.line;
    e->column = at.column;
    return e;
  }

  // Computes the height of a finished node and enforces the limit.
  ExprPtr seal(ExprPtr e) {
    int d = 0;
    auto see = [&d](const ExprPtr& x) {
      if (x) d = std::max(d, x->depth);
    };
    see(e->a), see(e->b), see(e->c), see(e->dyn_args), see(e->dyn_kwargs);
    for (const auto& x : e->items) see(x);
    for (const auto& kv : e->kwargs) see(kv.second);
    for (const auto& cmp : e->comparisons) see(cmp.second);
    e->depth = d + 1;
    if (e->depth > max_nesting_) {
      throw JinjaError{"TemplateSyntaxError",
                       "expression nested too deeply (more than " + std::to_string(max_nesting_) + " levels)", e->line,
                       e->column};
    }
    return e;
  }

  // ----- statements -----

  Body subparse(const Names* end_names) {
    Body body;
    while (cur().type != Tok::kEof) {
      const Token& t = cur();
      if (t.type == Tok::kData) {
        auto s = stmt(StmtKind::kData, t);
        s->text = t.text;
        body.push_back(std::move(s));
        next();
      } else if (t.type == Tok::kVariableBegin) {
        const Token& begin = next();
        auto s = stmt(StmtKind::kPrint, begin);
        s->expr = parse_tuple(false, true, {}, false);
        expect(Tok::kVariableEnd, "end of print statement");
        body.push_back(std::move(s));
      } else if (t.type == Tok::kBlockBegin) {
        next();
        if (end_names && cur().type == Tok::kName && contains(*end_names, cur().text)) return body;
        parse_statement(body);
        expect(Tok::kBlockEnd, "end of statement block");
      } else {
        fail_at(t, "unexpected '" + describe(t) + "'");
      }
    }
    return body;
  }

  // The body of a block statement up to one of `end_names`; leaves the stream on that name (or past it
  // with drop_needle).
  Body parse_statements(Names end_names, bool drop_needle) {
    Nest nest(*this);
    skip_op(":");
    expect(Tok::kBlockEnd, "end of statement block");
    end_stack_.push_back(end_names);
    Body body = subparse(&end_names);
    end_stack_.pop_back();
    if (cur().type == Tok::kEof) {
      std::string msg = "Unexpected end of template. Jinja was looking for the following tags: " + quoted_list(end_names) + ".";
      if (!tag_stack_.empty()) msg += " The innermost block that needs to be closed is '" + tag_stack_.back() + "'.";
      fail_at(cur(), msg);
    }
    if (drop_needle) next();
    return body;
  }

  StmtPtr stmt(StmtKind kind, const Token& at) {
    auto s = std::make_unique<Stmt>();
    s->kind = kind;
    s->line = at.line;
    s->column = at.column;
    return s;
  }

  void parse_statement(Body& out) {
    const Token& t = cur();
    if (t.type != Tok::kName) fail_at(t, "tag name expected");
    std::string tag = t.text;
    tag_stack_.push_back(tag);
    if (tag == "for") out.push_back(parse_for());
    else if (tag == "if") out.push_back(parse_if());
    else if (tag == "set") out.push_back(parse_set());
    else if (tag == "macro") out.push_back(parse_macro());
    else if (tag == "call") out.push_back(parse_call_block());
    else if (tag == "filter") out.push_back(parse_filter_block());
    else if (tag == "with") out.push_back(parse_with());
    else if (tag == "print") parse_print(out);
    else if (tag == "break" || tag == "continue") out.push_back(parse_loop_control());
    else if (tag == "generation") out.push_back(parse_generation());
    else if (tag == "block" || tag == "extends" || tag == "include" || tag == "import" || tag == "from" ||
             tag == "autoescape") {
      fail_at(t, "the '" + tag + "' tag is not supported: chat templates are rendered on their own, without a loader");
    } else {
      tag_stack_.pop_back();
      std::string msg = "Encountered unknown tag '" + tag + "'.";
      if (!end_stack_.empty()) {
        msg += " Jinja was looking for the following tags: " + quoted_list(end_stack_.back()) + ".";
      }
      if (!tag_stack_.empty()) msg += " The innermost block that needs to be closed is '" + tag_stack_.back() + "'.";
      fail_at(t, msg);
    }
    tag_stack_.pop_back();
  }

  StmtPtr parse_for() {
    auto s = stmt(StmtKind::kFor, next());
    s->target = parse_assign_target(true, false, {"in"});
    expect_name("in");
    s->expr = parse_tuple(false, false, {"recursive"}, false);
    if (skip_name("if")) s->cond = parse_expression(true);
    s->recursive = skip_name("recursive");
    ++loop_depth_;
    s->body = parse_statements({"endfor", "else"}, false);
    --loop_depth_;
    if (next().text == "else") s->else_body = parse_statements({"endfor"}, true);
    return s;
  }

  StmtPtr parse_if() {
    auto s = stmt(StmtKind::kIf, next());
    while (true) {
      ExprPtr test = parse_tuple(false, false, {}, false);
      Body body = parse_statements({"elif", "else", "endif"}, false);
      s->branches.emplace_back(std::move(test), std::move(body));
      const Token& t = next();
      if (t.text == "elif") continue;
      if (t.text == "else") s->else_body = parse_statements({"endif"}, true);
      break;
    }
    return s;
  }

  StmtPtr parse_set() {
    auto s = stmt(StmtKind::kSet, next());
    s->target = parse_assign_target(true, true, {});
    if (skip_op("=")) {
      s->expr = parse_tuple(false, true, {}, false);
      return s;
    }
    s->kind = StmtKind::kSetBlock;
    if (at_op("|")) s->filter = parse_filter(nullptr, false);
    int saved = loop_depth_;
    s->body = parse_statements({"endset"}, true);
    loop_depth_ = saved;
    return s;
  }

  void parse_signature(Stmt& s) {
    expect_op("(");
    while (!at_op(")")) {
      if (!s.params.empty()) expect_op(",");
      const Token& name = expect_name();
      s.params.push_back(name.text);
      if (skip_op("=")) {
        s.defaults.push_back(parse_expression(true));
      } else if (!s.defaults.empty()) {
        fail_at(name, "non-default argument follows default argument");
      }
    }
    expect_op(")");
  }

  void scan_special_names(Stmt& s) {
    s.uses_varargs = body_uses_name(s.body, "varargs");
    s.uses_kwargs = body_uses_name(s.body, "kwargs");
    s.uses_caller = body_uses_name(s.body, "caller");
  }

  StmtPtr parse_macro() {
    auto s = stmt(StmtKind::kMacro, next());
    s->name = expect_name().text;
    parse_signature(*s);
    int saved = loop_depth_;
    loop_depth_ = 0;
    s->body = parse_statements({"endmacro"}, true);
    loop_depth_ = saved;
    scan_special_names(*s);
    return s;
  }

  StmtPtr parse_call_block() {
    auto s = stmt(StmtKind::kCallBlock, next());
    if (at_op("(")) parse_signature(*s);
    const Token& at = cur();
    s->expr = parse_expression(true);
    if (s->expr->kind != ExprKind::kCall) fail_at(at, "expected call");
    int saved = loop_depth_;
    loop_depth_ = 0;
    s->body = parse_statements({"endcall"}, true);
    loop_depth_ = saved;
    scan_special_names(*s);
    return s;
  }

  StmtPtr parse_filter_block() {
    auto s = stmt(StmtKind::kFilterBlock, next());
    s->filter = parse_filter(nullptr, true);
    s->body = parse_statements({"endfilter"}, true);
    return s;
  }

  StmtPtr parse_with() {
    auto s = stmt(StmtKind::kWith, next());
    while (cur().type != Tok::kBlockEnd) {
      if (!s->targets.empty()) expect_op(",");
      s->targets.push_back(parse_assign_target(true, false, {}));
      expect_op("=");
      s->values.push_back(parse_expression(true));
    }
    s->body = parse_statements({"endwith"}, true);
    return s;
  }

  void parse_print(Body& out) {
    const Token& at = next();
    bool first = true;
    while (cur().type != Tok::kBlockEnd) {
      if (!first) expect_op(",");
      first = false;
      auto s = stmt(StmtKind::kPrint, at);
      s->expr = parse_expression(true);
      out.push_back(std::move(s));
    }
  }

  StmtPtr parse_loop_control() {
    const Token& t = next();
    if (loop_depth_ == 0) fail_at(t, "'" + t.text + "' outside loop");
    return stmt(t.text == "break" ? StmtKind::kBreak : StmtKind::kContinue, t);
  }

  // Hugging Face's AssistantTracker tag: renders its body unchanged. Its body is a call block's
  // caller, so it has its own scope and cannot break out of an enclosing loop.
  StmtPtr parse_generation() {
    auto s = stmt(StmtKind::kBody, next());
    int saved = loop_depth_;
    loop_depth_ = 0;
    s->body = parse_statements({"endgeneration"}, true);
    loop_depth_ = saved;
    return s;
  }

  // A Name, a (possibly nested) tuple of names, or with_namespace: name.attr.
  ExprPtr parse_assign_target(bool with_tuple, bool with_namespace, Names extra_end) {
    ExprPtr target;
    const Token& at = cur();
    if (with_tuple) {
      target = parse_tuple(true, true, extra_end, false, with_namespace);
    } else {
      target = parse_primary(with_namespace);
    }
    check_assignable(*target, at);
    return target;
  }

  void check_assignable(const Expr& e, const Token& at) {
    if (e.kind == ExprKind::kName) {
      if (e.name == "true" || e.name == "false" || e.name == "none" || e.name == "True" || e.name == "False" ||
          e.name == "None") {
        fail_at(at, "can't assign to 'const'");
      }
      return;
    }
    if (e.kind == ExprKind::kGetattr && e.a && e.a->kind == ExprKind::kName && e.value.is_bool()) return;  // ns.x
    if (e.kind == ExprKind::kTuple) {
      for (const auto& item : e.items) check_assignable(*item, at);
      return;
    }
    std::string what = e.kind == ExprKind::kConst ? "const" : e.kind == ExprKind::kCall ? "call" : "expression";
    fail_at(at, "can't assign to '" + what + "'");
  }

  // ----- expressions -----

  bool is_tuple_end(Names extra_end) const {
    const Token& t = cur();
    if (t.type == Tok::kVariableEnd || t.type == Tok::kBlockEnd || t.is_op(")")) return true;
    return t.type == Tok::kName && contains(extra_end, t.text);
  }

  // simplified: only primaries (assignment targets); explicit_parens: `()` is an empty tuple.
  ExprPtr parse_tuple(bool simplified, bool with_condexpr, Names extra_end, bool explicit_parens,
                      bool with_namespace = false) {
    const Token& at = cur();
    std::vector<ExprPtr> args;
    bool is_tuple = false;
    while (true) {
      if (!args.empty()) expect_op(",");
      if (is_tuple_end(extra_end)) break;
      args.push_back(simplified ? parse_primary(with_namespace) : parse_expression(with_condexpr));
      if (at_op(",")) {
        is_tuple = true;
      } else {
        break;
      }
    }
    if (!is_tuple) {
      if (!args.empty()) return std::move(args[0]);
      if (!explicit_parens) fail_at(cur(), "Expected an expression, got '" + describe(cur()) + "'");
    }
    auto e = node(ExprKind::kTuple, at);
    e->items = std::move(args);
    return seal(std::move(e));
  }

  ExprPtr parse_expression(bool with_condexpr) { return with_condexpr ? parse_condexpr() : parse_or(); }

  ExprPtr parse_condexpr() {
    const Token* at = &cur();
    ExprPtr expr1 = parse_or();
    while (at_name("if")) {
      next();
      ExprPtr test = parse_or();
      ExprPtr expr3;
      if (skip_name("else")) {
        Nest nest(*this);
        expr3 = parse_condexpr();
      }
      auto e = node(ExprKind::kCondExpr, *at);
      e->a = std::move(expr1);
      e->b = std::move(test);
      e->c = std::move(expr3);
      expr1 = seal(std::move(e));
      at = &cur();
    }
    return expr1;
  }

  ExprPtr parse_or() {
    ExprPtr left = parse_and();
    while (at_name("or")) {
      const Token& at = next();
      auto e = node(ExprKind::kOr, at);
      e->a = std::move(left);
      e->b = parse_and();
      left = seal(std::move(e));
    }
    return left;
  }

  ExprPtr parse_and() {
    ExprPtr left = parse_not();
    while (at_name("and")) {
      const Token& at = next();
      auto e = node(ExprKind::kAnd, at);
      e->a = std::move(left);
      e->b = parse_not();
      left = seal(std::move(e));
    }
    return left;
  }

  ExprPtr parse_not() {
    if (at_name("not")) {
      Nest nest(*this);
      auto e = node(ExprKind::kNot, next());
      e->a = parse_not();
      return seal(std::move(e));
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
    const Token& at = cur();
    ExprPtr expr = parse_math1();
    std::vector<std::pair<CmpOp, ExprPtr>> ops;
    while (true) {
      const Token& t = cur();
      CmpOp op;
      if (t.is_op("==")) op = CmpOp::kEq;
      else if (t.is_op("!=")) op = CmpOp::kNe;
      else if (t.is_op("<")) op = CmpOp::kLt;
      else if (t.is_op("<=")) op = CmpOp::kLe;
      else if (t.is_op(">")) op = CmpOp::kGt;
      else if (t.is_op(">=")) op = CmpOp::kGe;
      else if (t.is_name("in")) op = CmpOp::kIn;
      else if (t.is_name("not") && peek().is_name("in")) { next(); op = CmpOp::kNotIn; }
      else break;
      next();
      ops.emplace_back(op, parse_math1());
    }
    if (ops.empty()) return expr;
    auto e = node(ExprKind::kCompare, at);
    e->a = std::move(expr);
    e->comparisons = std::move(ops);
    return seal(std::move(e));
  }

  ExprPtr binary(BinOp op, const Token& at, ExprPtr left, ExprPtr right) {
    auto e = node(ExprKind::kBinary, at);
    e->op = op;
    e->a = std::move(left);
    e->b = std::move(right);
    return seal(std::move(e));
  }

  ExprPtr parse_math1() {
    ExprPtr left = parse_concat();
    while (at_op("+") || at_op("-")) {
      const Token& at = next();
      BinOp op = at.text == "+" ? BinOp::kAdd : BinOp::kSub;
      left = binary(op, at, std::move(left), parse_concat());
    }
    return left;
  }

  ExprPtr parse_concat() {
    const Token& at = cur();
    std::vector<ExprPtr> args;
    args.push_back(parse_math2());
    while (skip_op("~")) args.push_back(parse_math2());
    if (args.size() == 1) return std::move(args[0]);
    auto e = node(ExprKind::kConcat, at);
    e->items = std::move(args);
    return seal(std::move(e));
  }

  ExprPtr parse_math2() {
    ExprPtr left = parse_pow();
    while (at_op("*") || at_op("/") || at_op("//") || at_op("%")) {
      const Token& at = next();
      BinOp op = at.text == "*" ? BinOp::kMul : at.text == "/" ? BinOp::kDiv : at.text == "//" ? BinOp::kFloorDiv : BinOp::kMod;
      left = binary(op, at, std::move(left), parse_pow());
    }
    return left;
  }

  ExprPtr parse_pow() {
    ExprPtr left = parse_unary(true);
    while (at_op("**")) {
      const Token& at = next();
      left = binary(BinOp::kPow, at, std::move(left), parse_unary(true));
    }
    return left;
  }

  ExprPtr parse_unary(bool with_filter) {
    ExprPtr e;
    if (at_op("-") || at_op("+")) {
      Nest nest(*this);
      const Token& at = next();
      e = node(at.text == "-" ? ExprKind::kNeg : ExprKind::kPos, at);
      e->a = parse_unary(false);
      e = seal(std::move(e));
    } else {
      e = parse_primary(false);
    }
    e = parse_postfix(std::move(e));
    if (with_filter) e = parse_filter_expr(std::move(e));
    return e;
  }

  ExprPtr parse_primary(bool with_namespace) {
    const Token& t = cur();
    if (t.type == Tok::kName) {
      next();
      if (t.text == "true" || t.text == "True" || t.text == "false" || t.text == "False") {
        auto e = node(ExprKind::kConst, t);
        e->value = Value::boolean(t.text == "true" || t.text == "True");
        return seal(std::move(e));
      }
      if (t.text == "none" || t.text == "None") {
        auto e = node(ExprKind::kConst, t);
        e->value = Value::none();
        return seal(std::move(e));
      }
      auto name = node(ExprKind::kName, t);
      name->name = t.text;
      if (with_namespace && at_op(".")) {
        next();
        auto e = node(ExprKind::kGetattr, t);
        e->name = expect_name().text;
        e->a = seal(std::move(name));
        e->value = Value::boolean(true);  // marks a namespace reference (ns.attr as an assignment target)
        return seal(std::move(e));
      }
      return seal(std::move(name));
    }
    if (t.type == Tok::kString) {
      std::string s;
      while (cur().type == Tok::kString) s += next().text;
      auto e = node(ExprKind::kConst, t);
      e->value = Value::string(std::move(s));
      return seal(std::move(e));
    }
    if (t.type == Tok::kInteger || t.type == Tok::kFloat) {
      next();
      auto e = node(ExprKind::kConst, t);
      e->value = t.type == Tok::kInteger ? Value::integer(t.int_value) : Value::number(t.float_value);
      return seal(std::move(e));
    }
    if (t.is_op("(")) {
      Nest nest(*this);
      next();
      ExprPtr e = parse_tuple(false, true, {}, true);
      expect_op(")");
      return e;
    }
    if (t.is_op("[")) {
      Nest nest(*this);
      auto e = node(ExprKind::kList, next());
      while (!at_op("]")) {
        if (!e->items.empty()) expect_op(",");
        if (at_op("]")) break;
        e->items.push_back(parse_expression(true));
      }
      expect_op("]");
      return seal(std::move(e));
    }
    if (t.is_op("{")) {
      Nest nest(*this);
      auto e = node(ExprKind::kDict, next());
      while (!at_op("}")) {
        if (!e->items.empty()) expect_op(",");
        if (at_op("}")) break;
        e->items.push_back(parse_expression(true));
        expect_op(":");
        e->items.push_back(parse_expression(true));
      }
      expect_op("}");
      return seal(std::move(e));
    }
    fail_at(t, "unexpected '" + describe(t) + "'");
  }

  ExprPtr parse_postfix(ExprPtr e) {
    while (true) {
      if (at_op(".") || at_op("[")) {
        e = parse_subscript(std::move(e));
      } else if (at_op("(")) {
        e = parse_call(std::move(e));
      } else {
        return e;
      }
    }
  }

  ExprPtr parse_filter_expr(ExprPtr e) {
    while (true) {
      if (at_op("|")) {
        e = parse_filter(std::move(e), false);
      } else if (at_name("is")) {
        e = parse_test(std::move(e));
      } else if (at_op("(")) {
        e = parse_call(std::move(e));
      } else {
        return e;
      }
    }
  }

  ExprPtr parse_subscript(ExprPtr obj) {
    const Token& t = next();
    if (t.is_op(".")) {
      const Token& attr = next();
      if (attr.type == Tok::kName) {
        auto e = node(ExprKind::kGetattr, t);
        e->a = std::move(obj);
        e->name = attr.text;
        return seal(std::move(e));
      }
      if (attr.type != Tok::kInteger) fail_at(attr, "expected name or number");
      auto idx = node(ExprKind::kConst, attr);
      idx->value = Value::integer(attr.int_value);
      auto e = node(ExprKind::kGetitem, t);
      e->a = std::move(obj);
      e->b = seal(std::move(idx));
      return seal(std::move(e));
    }
    Nest nest(*this);
    std::vector<ExprPtr> args;
    while (!at_op("]")) {
      if (!args.empty()) expect_op(",");
      args.push_back(parse_subscribed());
    }
    expect_op("]");
    auto e = node(ExprKind::kGetitem, t);
    e->a = std::move(obj);
    if (args.size() == 1) {
      e->b = std::move(args[0]);
    } else {
      auto tuple = node(ExprKind::kTuple, t);
      tuple->items = std::move(args);
      e->b = seal(std::move(tuple));
    }
    return seal(std::move(e));
  }

  ExprPtr parse_subscribed() {
    const Token& at = cur();
    ExprPtr start;
    if (at_op(":")) {
      next();
    } else {
      ExprPtr first = parse_expression(true);
      if (!at_op(":")) return first;
      next();
      start = std::move(first);
    }
    auto e = node(ExprKind::kSlice, at);
    e->a = std::move(start);
    if (!at_op(":") && !at_op("]") && !at_op(",")) e->b = parse_expression(true);
    if (skip_op(":")) {
      if (!at_op("]") && !at_op(",")) e->c = parse_expression(true);
    }
    return seal(std::move(e));
  }

  void parse_call_args(Expr& e) {
    Nest nest(*this);
    const Token& lparen = expect_op("(");
    bool require_comma = false;
    auto ensure = [&](bool ok) {
      if (!ok) fail_at(lparen, "invalid syntax for function call expression");
    };
    while (!at_op(")")) {
      if (require_comma) {
        expect_op(",");
        if (at_op(")")) break;
      }
      if (at_op("*")) {
        ensure(!e.dyn_args && !e.dyn_kwargs);
        next();
        e.dyn_args = parse_expression(true);
      } else if (at_op("**")) {
        ensure(!e.dyn_kwargs);
        next();
        e.dyn_kwargs = parse_expression(true);
      } else if (cur().type == Tok::kName && peek().is_op("=")) {
        ensure(!e.dyn_kwargs);
        std::string key = next().text;
        next();
        e.kwargs.emplace_back(std::move(key), parse_expression(true));
      } else {
        ensure(!e.dyn_args && !e.dyn_kwargs && e.kwargs.empty());
        e.items.push_back(parse_expression(true));
      }
      require_comma = true;
    }
    expect_op(")");
  }

  ExprPtr parse_call(ExprPtr callee) {
    auto e = node(ExprKind::kCall, cur());
    e->a = std::move(callee);
    parse_call_args(*e);
    return seal(std::move(e));
  }

  std::string parse_dotted_name() {
    std::string name = expect_name().text;
    while (skip_op(".")) name += "." + expect_name().text;
    return name;
  }

  // subject|name(args)|...; start_inline: the first filter has no leading pipe (filter blocks).
  ExprPtr parse_filter(ExprPtr subject, bool start_inline) {
    while (at_op("|") || start_inline) {
      if (!start_inline) next();
      start_inline = false;
      const Token& at = cur();
      auto e = node(ExprKind::kFilter, at);
      e->name = parse_dotted_name();
      e->filter = find_filter(e->name);
      e->a = std::move(subject);
      if (at_op("(")) parse_call_args(*e);
      subject = seal(std::move(e));
    }
    return subject;
  }

  ExprPtr parse_test(ExprPtr subject) {
    const Token& is = next();
    bool negated = skip_name("not");
    const Token& at = cur();
    auto e = node(ExprKind::kTest, at);
    e->name = parse_dotted_name();
    e->test = find_test(e->name);
    e->a = std::move(subject);
    const Token& t = cur();
    if (t.is_op("(")) {
      parse_call_args(*e);
    } else if ((t.type == Tok::kName || t.type == Tok::kString || t.type == Tok::kInteger || t.type == Tok::kFloat ||
                t.is_op("(") || t.is_op("[") || t.is_op("{")) &&
               !t.is_name("else") && !t.is_name("or") && !t.is_name("and")) {
      if (t.is_name("is")) fail_at(t, "You cannot chain multiple tests with is");
      e->items.push_back(parse_postfix(parse_primary(false)));
    }
    ExprPtr test = seal(std::move(e));
    if (!negated) return test;
    auto n = node(ExprKind::kNot, is);
    n->a = std::move(test);
    return seal(std::move(n));
  }

  std::vector<Token> toks_;
  size_t pos_ = 0;
  int max_nesting_;
  int nesting_ = 0;
  int loop_depth_ = 0;
  std::vector<std::string> tag_stack_;
  std::vector<Names> end_stack_;
};

}  // namespace

Body parse(std::string_view source, int max_nesting) {
  return Parser(tokenize(source), max_nesting).parse_template();
}

}  // namespace kvasir::jinja
