/* The C that the extension module needs Python.h for: shortcuts to the
 * objects it makes by hand on its hot paths (match()'s ints, lists, names
 * and groups;
 * the rows it reads are _pyrows.h's).  It is here, not in csrc/, because
 * the core has no Python.h; it is included by _core.pyx alone, after
 * Python.h. */
#ifndef TOPICMATCH_PYOBJECTS_H
#define TOPICMATCH_PYOBJECTS_H

#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "sublist.h"             /* fs_result */

/* 1 on a free-threaded CPython: another thread may change a list
 * while this one reads it */
#ifdef Py_GIL_DISABLED
#define TM_FREE_THREADED 1
#else
#define TM_FREE_THREADED 0
#endif

#define TM_HIGH_BITS 0x8080808080808080ull    /* each byte's top bit */

/* match()'s ints, kept: a direct-mapped table of the last int made for
 * each of TM_INTS slots (the id's Fibonacci hash picks the slot), so an
 * id that comes back -- a subscriber matched again, the usual case --
 * is one probe and a new reference, where making the int and freeing
 * it with its list cost ~120 instructions (callgrind, match() heavy:
 * 81 ids a call, ~92% of them found: 18,620 -> ~10,810 a call).  Ints
 * are immutable, so a shared one is the same value to every caller.
 * At most TM_INTS ints are held (~200 KiB with the table);
 * release_memory() lets them go.  With the GIL only: on a
 * free-threaded build two matches would race on a slot, so each int
 * is made afresh there.  An int's deallocation runs no Python code,
 * so replacing a slot's int cannot re-enter. */
#define TM_INTS_BITS 12
#define TM_INTS (1u << TM_INTS_BITS)
typedef struct { long long id; PyObject *o; } tm_int_slot;
static tm_int_slot tm_ints[TM_INTS];
static inline PyObject *tm_int(long long id)
{
#ifdef Py_GIL_DISABLED
    return PyLong_FromLongLong(id);
#else
    tm_int_slot *e = &tm_ints[((unsigned long long)id * 0x9E3779B97F4A7C15ull) >> (64 - TM_INTS_BITS)];
    PyObject *o = e->o;
    if (o != NULL && e->id == id) {
        Py_INCREF(o);
        return o;
    }
    PyObject *made = PyLong_FromLongLong(id);
    if (made == NULL)
        return NULL;
    Py_INCREF(made);
    e->id = id;
    e->o = made;
    Py_XDECREF(o);
    return made;
#endif
}
/* A list of n slots for its maker to fill at once, every slot set
 * before anyone else sees it: made as PyList_New(0) (from the free
 * list) with its slots from PyMem_Malloc, not PyList_New(n)'s
 * PyMem_Calloc, whose zeroing is a call to memset (~25 instructions
 * a list of match()'s).  The fields are the default build's list
 * (ob_item, allocated, freed by list_dealloc with PyMem_Free); a
 * free-threaded build allocates a list's slots its own way, and gets
 * PyList_New(n).  NULL with the error set. */
static inline PyObject *tm_list_unset(Py_ssize_t n)
{
#ifdef Py_GIL_DISABLED
    return PyList_New(n);
#else
    if (n == 0)
        return PyList_New(0);
    PyObject **items = (PyObject **)PyMem_Malloc((size_t)n * sizeof(PyObject *));
    if (items == NULL)
        return PyErr_NoMemory();
    PyObject *l = PyList_New(0);
    if (l == NULL) {
        PyMem_Free(items);
        return NULL;
    }
    ((PyListObject *)l)->ob_item = items;
    ((PyListObject *)l)->allocated = n;
    Py_SET_SIZE(l, n);
    return l;
#endif
}
/* Drop every kept int (release_memory). */
static void tm_ints_clear(void)
{
    for (unsigned i = 0; i < TM_INTS; i++)
        Py_CLEAR(tm_ints[i].o);
}

/* p[0..n) as a str, bytes that are not UTF-8 as surrogates
 * (surrogateescape), as every name match() and reverse_match() return is
 * made; NULL with the error set.  ASCII of two bytes or more -- a queue
 * name, nearly always -- is copied into a str made at its size: the UTF-8
 * decoder's own passes cost about twice as much (callgrind, match()
 * heavy: ~200 instructions a name against ~110).  (0 and 1 bytes: the
 * decoder's shared strs.) */
static inline PyObject *tm_str(const char *p, size_t n)
{
    uint64_t acc = 0, w;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        memcpy(&w, p + i, 8);
        acc |= w;
    }
    for (; i < n; i++)
        acc |= (unsigned char)p[i];
    if (n < 2 || (acc & TM_HIGH_BITS))
        return PyUnicode_DecodeUTF8(p, (Py_ssize_t)n, "surrogateescape");
    PyObject *s = PyUnicode_New((Py_ssize_t)n, 127);
    if (s != NULL)
        memcpy(PyUnicode_DATA(s), p, n);
    return s;
}

/* ids[0..n) as a list of ints, made at its final size (match() builds one
 * or more a call: no append, no resize), each int tm_int's; NULL with the
 * error set. */
static inline PyObject *tm_id_list(const int64_t *ids, size_t n)
{
    PyObject *out = tm_list_unset((Py_ssize_t)n);
    if (out == NULL)
        return NULL;
    for (size_t i = 0; i < n; i++) {
        PyObject *o = tm_int(ids[i]);
        if (o == NULL) {
            Py_SET_SIZE(out, (Py_ssize_t)i);     /* the slots set so far: freed cleanly */
            Py_DECREF(out);
            return NULL;
        }
        PyList_SET_ITEM(out, (Py_ssize_t)i, o);
    }
    return out;
}

/* r's groups as match() returns them: a list, made at its final size, of
 * (name, filter, members) -- filter the group's own where with_filter
 * (MQTT, whose groups are (name, filter) pairs), else None; NULL with the
 * error set. */
static PyObject *tm_groups(const fs_result *r, int with_filter)
{
    PyObject *groups = PyList_New((Py_ssize_t)r->ngroups);
    for (size_t i = 0; groups != NULL && i < r->ngroups; i++) {
        const fs_group_out *g = &r->groups[i];
        PyObject *one = PyTuple_New(3);
        PyObject *name = one ? tm_str(r->arena + g->name_off, g->name_len) : NULL;
        PyObject *filt = !name ? NULL : with_filter ? tm_str(r->arena + g->filter_off, g->filter_len) : Py_None;
        PyObject *members = filt ? tm_id_list(r->ids + g->members_off, g->members_len) : NULL;
        if (filt == Py_None)
            Py_INCREF(Py_None);
        if (one != NULL) {          /* the tuple takes each reference (a NULL slot: none) */
            PyTuple_SET_ITEM(one, 0, name);
            PyTuple_SET_ITEM(one, 1, filt);
            PyTuple_SET_ITEM(one, 2, members);
        }
        if (members == NULL) {
            Py_XDECREF(one);
            Py_CLEAR(groups);       /* the slots not yet set are NULL: freed cleanly */
            break;
        }
        PyList_SET_ITEM(groups, (Py_ssize_t)i, one);
    }
    return groups;
}

#endif
