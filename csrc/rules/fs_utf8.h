/* fs_utf8.h - is there a well-formed UTF-8 sequence here, and how long?
 *
 * Origin: written for topicmatch from RFC 3629, section 4 (the syntax of
 * UTF-8 byte sequences): a lead byte gives the length (2, 3 or 4), every
 * continuation byte is 10xxxxxx, and the code point may not be overlong
 * (below the smallest one of that length), a surrogate (U+D800..U+DFFF)
 * or beyond U+10FFFF.  These are exactly the strings a Python str
 * encodes to, so bytes from Arrow and text from Python are held to one
 * rule.  The tokenizer and the loader both use it (fs_dialect.h).
 */
#ifndef FS_UTF8_H
#define FS_UTF8_H

#include <stddef.h>

/* Length of the UTF-8 sequence starting at s[i] (i < len; 1 for ASCII),
 * or 0 when it is malformed (overlong, surrogate, beyond U+10FFFF,
 * truncated by len). */
static inline size_t fs_utf8_seq(const unsigned char *s, size_t i, size_t len)
{
    unsigned c = s[i];
    if (c < 0x80) return 1;
    size_t n;
    unsigned min;
    unsigned cp;
    if ((c & 0xE0) == 0xC0) { n = 2; cp = c & 0x1F; min = 0x80; }
    else if ((c & 0xF0) == 0xE0) { n = 3; cp = c & 0x0F; min = 0x800; }
    else if ((c & 0xF8) == 0xF0) { n = 4; cp = c & 0x07; min = 0x10000; }
    else return 0;
    if (i + n > len) return 0;
    for (size_t k = 1; k < n; k++) {
        if ((s[i + k] & 0xC0) != 0x80) return 0;
        cp = (cp << 6) | (s[i + k] & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
    return n;
}

#endif
