// SPDX-License-Identifier: MIT
/*
 * The header probe: compiled with -g against one CPython version's own headers (public and
 * internal, Py_BUILD_CORE), it gives build/pyoffsets-gen a DWARF description of exactly the
 * structs that version's interpreter is built from, for versions where no build with DWARF is
 * at hand (Debian's python3.14 and python3.15 are stripped; their -dev packages carry the
 * headers): see pyoffsets/gen-tables.sh. It is never linked into probing.
 *
 * One object of each struct the tables describe, so that the compiler emits its definition.
 */
#define Py_BUILD_CORE 1
#include "Python.h"
#include "internal/pycore_code.h"
#include "internal/pycore_debug_offsets.h"
#include "internal/pycore_dict.h"
#include "internal/pycore_frame.h"
#include "internal/pycore_genobject.h"
#include "internal/pycore_gil.h"
#include "internal/pycore_interp.h"
#include "internal/pycore_long.h"
#include "internal/pycore_runtime.h"
#include "internal/pycore_setobject.h"

_PyRuntimeState probe_runtime;
PyInterpreterState probe_interp;
PyThreadState probe_tstate;
_PyInterpreterFrame probe_iframe;
PyFrameObject probe_frame;
PyCodeObject probe_code;
_Py_DebugOffsets probe_debug_offsets;
struct _gil_runtime_state probe_gil;
Py_tss_t probe_tss;
PyObject probe_object;
PyVarObject probe_varobject;
PyTypeObject probe_type;
PyHeapTypeObject probe_heaptype;
PyGenObject probe_gen;
PyCellObject probe_cell;
PySetObject probe_set;
setentry probe_setentry;
PyWeakReference probe_weakref;
PyDictObject probe_dict;
struct _dictkeysobject probe_dictkeys;
struct _dictvalues probe_dictvalues;
PyDictKeyEntry probe_dictentry;
PyDictUnicodeEntry probe_dictuentry;
PyModuleObject probe_module;
PyASCIIObject probe_ascii;
PyCompactUnicodeObject probe_compact;
PyUnicodeObject probe_unicode;
PyLongObject probe_long;
PyFloatObject probe_float;
PyBytesObject probe_bytes;
PyTupleObject probe_tuple;
PyListObject probe_list;
