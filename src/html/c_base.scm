; kidiom: the C constructs tree-sitter-cpp's own highlights.scm leaves to the
; C grammar's query (it starts with "inherits: c", which the crate does not
; ship). Node and token names are the C++ grammar's; every capture is one
; that src/html/highlight.rs knows.

(comment) @comment

[
  (string_literal)
  (raw_string_literal)
  (char_literal)
  (system_lib_string)
] @string

(number_literal) @number
[(true) (false) (null)] @constant.builtin

[(primitive_type) (sized_type_specifier) (type_identifier)] @type

[
  "break" "case" "const" "continue" "default" "do" "else" "enum" "extern"
  "for" "if" "inline" "return" "sizeof" "static" "struct" "switch"
  "typedef" "union" "volatile" "while" "goto"
] @keyword

[
  "#define" "#elif" "#else" "#endif" "#if" "#ifdef" "#ifndef" "#include"
  (preproc_directive)
] @keyword

(field_identifier) @property

(call_expression function: (identifier) @function)
(call_expression function: (field_expression field: (field_identifier) @function))
(function_declarator declarator: (identifier) @function)
(preproc_function_def name: (identifier) @function)
