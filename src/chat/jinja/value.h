// Values of the jinja interpreter, modelled on the Python objects Jinja2 templates see: None, bool,
// int, float, str, list, tuple, dict, generators and views, Undefined, and a few objects (namespace,
// loop, macro, functions). Containers are immutable (the sandbox forbids mutating them) and shared by
// pointer; mutable objects (namespace, loop state) are owned by the interpreter's arena for the whole
// render, so reference cycles between them cannot leak.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace kvasir::jinja {

class Interpreter;
class Object;
class Printer;
struct Array;
struct Map;

// Containers nested deeper than this cannot be built; it bounds every recursive walk over values.
inline constexpr int kMaxValueDepth = 128;

enum class Kind : uint8_t { kUndefined, kNone, kBool, kInt, kFloat, kString, kArray, kMap, kObject };

// The Python type an Array stands for: they differ in printing, indexing, len() and truthiness.
enum class ArrayKind : uint8_t {
  kList, kTuple,
  kGenerator,   // filters like select/map/unique/batch: one-shot, no len(), always true
  kIterator,    // reversed(list) from |reverse: same as a generator
  kRange,       // range(...): printed as range(a, b[, c])
  kDictKeys, kDictValues, kDictItems,  // dict.keys()/values()/items() views
};

class Value {
 public:
  Value() = default;  // Undefined
  static Value undefined(std::string hint, bool unsafe = false);
  static Value none() { Value v; v.kind_ = Kind::kNone; return v; }
  static Value boolean(bool b) { Value v; v.kind_ = Kind::kBool; v.i_ = b; return v; }
  static Value integer(int64_t i) { Value v; v.kind_ = Kind::kInt; v.i_ = i; return v; }
  static Value number(double d) { Value v; v.kind_ = Kind::kFloat; v.f_ = d; return v; }
  static Value string(std::string s);
  static Value string(std::shared_ptr<const std::string> s);
  static Value array(std::shared_ptr<const Array> a);
  static Value array(std::vector<Value> items, ArrayKind kind = ArrayKind::kList);  // throws if too deep
  static Value tuple(std::vector<Value> items) { return array(std::move(items), ArrayKind::kTuple); }
  static Value map(std::shared_ptr<const Map> m);
  static Value object(Object* o) { Value v; v.kind_ = Kind::kObject; v.o_ = o; return v; }

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_bool() const { return kind_ == Kind::kBool; }
  bool is_int() const { return kind_ == Kind::kInt; }            // not bool
  bool is_integral() const { return kind_ == Kind::kInt || kind_ == Kind::kBool; }  // Python int incl. bool
  bool is_float() const { return kind_ == Kind::kFloat; }
  bool is_number() const { return is_integral() || is_float(); }
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_array() const { return kind_ == Kind::kArray; }
  bool is_map() const { return kind_ == Kind::kMap; }
  bool is_object() const { return kind_ == Kind::kObject; }
  bool is_array_of(ArrayKind k) const;
  bool is_sequence() const;  // list, tuple, range: indexable with len()

  bool as_bool() const { return i_ != 0; }
  int64_t as_int() const { return i_; }             // bool or int
  double as_double() const { return is_float() ? f_ : static_cast<double>(i_); }
  const std::string& as_string() const { return *s_; }
  const std::shared_ptr<const std::string>& string_ptr() const { return s_; }
  const Array& as_array() const { return *a_; }
  const std::shared_ptr<const Array>& array_ptr() const { return a_; }
  const Map& as_map() const { return *m_; }
  const std::shared_ptr<const Map>& map_ptr() const { return m_; }
  Object* as_object() const { return o_; }
  const std::string& undefined_hint() const;  // the UndefinedError message this value raises when used
  bool undefined_is_unsafe() const { return i_ != 0; }  // raises SecurityError rather than UndefinedError
  int depth() const;  // container nesting, 0 for scalars

 private:
  Kind kind_ = Kind::kUndefined;
  union {
    int64_t i_ = 0;
    double f_;
    Object* o_;
  };
  std::shared_ptr<const std::string> s_;  // string, or the hint of an Undefined
  std::shared_ptr<const Array> a_;
  std::shared_ptr<const Map> m_;
};

struct Array {
  ArrayKind kind = ArrayKind::kList;
  std::vector<Value> items;
  int depth = 1;
  int64_t range_start = 0, range_stop = 0, range_step = 1;  // kRange only, for printing
  mutable bool consumed = false;  // generators and iterators are one-shot
  bool one_shot() const { return kind == ArrayKind::kGenerator || kind == ArrayKind::kIterator; }
};

// A dict: insertion-ordered, keys compared the Python way (1 == 1.0 == True).
struct Map {
  std::vector<std::pair<Value, Value>> items;
  int depth = 1;
  const Value* find(const Value& key) const;
  const Value* find(std::string_view key) const;
  std::unordered_map<std::string_view, size_t> index;  // string keys of large maps
};

// Builds a Map: setting an existing key replaces its value and keeps its position.
class MapBuilder {
 public:
  void set(Value key, Value value);  // throws TypeError for unhashable keys
  size_t size() const { return map_->items.size(); }
  Value build();
 private:
  std::shared_ptr<Map> map_ = std::make_shared<Map>();
};

struct CallArgs {
  std::vector<Value> args;
  std::vector<std::pair<std::string, Value>> kwargs;
};

// Binds arguments to parameter names the way Python does; an unknown keyword, a surplus positional
// or a parameter given twice is a TypeError naming `fn`. Slots of parameters not given are empty.
std::vector<std::optional<Value>> bind_args(const CallArgs& call, std::string_view fn,
                                            std::initializer_list<std::string_view> params);

// Objects with identity and behaviour. Owned by the interpreter for the whole render.
class Object {
 public:
  virtual ~Object() = default;
  virtual std::string type_name() const = 0;
  virtual void repr(Printer& p, int depth) const;
  // Attribute lookup: nullopt when the object has no such attribute.
  virtual std::optional<Value> get_attr(Interpreter& in, std::string_view name);
  virtual bool is_namespace() const { return false; }
  virtual void set_attr(std::string_view name, Value v);  // namespaces only
  virtual bool callable() const { return false; }
  virtual Value call(Interpreter& in, CallArgs& args);
  // obj.name(args) for method-like attributes; nullopt when there is no such method.
  virtual std::optional<Value> call_method(Interpreter& in, std::string_view name, CallArgs& args);
};

// Python semantics over values.
bool truthy(const Value& v);
bool py_equal(const Value& a, const Value& b, int depth = 0);
// Three-way comparison for <, <=, >, >=; `op` names the operator in the TypeError for mismatched types.
int py_compare(const Value& a, const Value& b, std::string_view op, int depth = 0);
std::string type_name(const Value& v);   // Python type name: str, int, dict, NoneType, ...
void check_hashable(const Value& v);     // TypeError: unhashable type: 'list'
int64_t py_len(const Value& v);          // TypeError when the value has no len()
// The items a for loop, list() or `in` sees: dict → keys, str → characters, Undefined → nothing.
// Consumes generators. TypeError for values that are not iterable.
std::vector<Value> iterate(const Value& v);
bool py_contains(const Value& container, const Value& item);  // `item in container`
[[noreturn]] void raise_undefined(const Value& v);

// Python str() and repr() into a bounded buffer: going past max_bytes throws.
class Printer {
 public:
  explicit Printer(size_t max_bytes) : max_(max_bytes) {}
  void str(const Value& v, int depth = 0);
  void repr(const Value& v, int depth = 0);
  void raw(std::string_view s);
  void repr_string(std::string_view s);
  std::string take() { return std::move(out_); }
  size_t max_bytes() const { return max_; }

 private:
  std::string out_;
  size_t max_;
};

std::string to_str(const Value& v, size_t max_bytes);
std::string to_repr(const Value& v, size_t max_bytes);

}  // namespace kvasir::jinja
