"""The Qt binding must not lose references to None while painting: PySide6 6.12.0's QPainter.setPen did,
and on Python before 3.12 the window crashed with 'deallocating None' after a few thousand repaints."""

import sys

from PySide6.QtCore import QPointF
from PySide6.QtGui import QBrush, QFont, QImage, QPainter, QPen


def test_painting_keeps_references_to_none(qapp):
    image = QImage(64, 64, QImage.Format.Format_ARGB32)
    painter = QPainter(image)
    try:
        before = sys.getrefcount(None)
        for _ in range(2000):
            painter.setPen(QPen())
            painter.setBrush(QBrush())
            painter.setFont(QFont())
            painter.drawText(QPointF(1, 1), "a")
        assert sys.getrefcount(None) - before > -100  # a leak-free binding stays near 0; 6.12.0 loses 2000
    finally:
        painter.end()
